package wasmfilter

import (
	"strconv"
	"strings"

	"github.com/bucketgrid/bucketgrid/internal/ruledoc"
)

// decodeConfig reads a configuration document into a Config. Members are
// matched by exact name; unknown and repeated members, values of the wrong
// type and numbers that are not integers in range are errors naming the
// member's path. null counts as absent.
func decodeConfig(raw []byte) (Config, error) {
	var c Config
	v, err := parseJSON(raw)
	if err != nil {
		return c, err
	}
	err = members(v, "", func(d *decoder, name string) bool {
		switch name {
		case "policies":
			d.fail(migratePolicies)
		case "path":
			d.fail(migratePath)
		case "domain":
			d.str(&c.Domain)
		case "rate_limits":
			c.RateLimits = []RateLimitConfig{}
			d.array(func(d *decoder) { c.RateLimits = append(c.RateLimits, decodeRateLimit(d)) })
		case "rules":
			c.Rules = []ruledoc.Document{}
			d.array(func(d *decoder) { c.Rules = append(c.Rules, decodeDocument(d)) })
		case "slots":
			d.int(&c.Slots)
		case "failure_mode":
			d.str(&c.FailureMode)
		case "table_full":
			d.str(&c.TableFull)
		case "max_attempts":
			d.int(&c.MaxAttempts)
		case "raw_path":
			d.bool(&c.RawPath)
		case "headers":
			d.object(func(d *decoder, name string) bool {
				switch name {
				case "ietf":
					d.bool(&c.Headers.IETF)
				case "x_ratelimit":
					d.bool(&c.Headers.XRateLimit)
				case "draft":
					d.bool(&c.Headers.Draft)
				default:
					return false
				}
				return true
			})
		case "deny":
			d.object(func(d *decoder, name string) bool {
				switch name {
				case "body":
					if d.v.kind != jsonNull {
						var b string
						d.str(&b)
						c.Deny.Body = &b
					}
				case "content_type":
					d.str(&c.Deny.ContentType)
				default:
					return false
				}
				return true
			})
		case "shared_data_prefix":
			d.str(&c.SharedDataPrefix)
		case "stat_prefix":
			d.str(&c.StatPrefix)
		default:
			return false
		}
		return true
	})
	return c, err
}

// decoder is a position in the document: a value and its path. The first
// error sticks in *err and stops all further decoding.
type decoder struct {
	v    jsonValue
	path string
	err  *error
}

// members decodes the object v with field, which decodes the member it
// knows and reports false for a name it does not.
func members(v jsonValue, path string, field func(d *decoder, name string) bool) error {
	var err error
	d := decoder{v: v, path: path, err: &err}
	d.object(field)
	return err
}

func (d *decoder) fail(msg string) {
	if *d.err == nil {
		*d.err = configErr(d.path, msg)
	}
}

func (d *decoder) want(k jsonKind) bool {
	if *d.err != nil || d.v.kind == jsonNull {
		return false
	}
	if d.v.kind != k {
		d.fail("want " + k.String() + ", got " + d.v.kind.String())
		return false
	}
	return true
}

func (d *decoder) child(v jsonValue, path string) *decoder {
	return &decoder{v: v, path: path, err: d.err}
}

func (d *decoder) object(field func(d *decoder, name string) bool) {
	if !d.want(jsonObject) {
		return
	}
	for i, m := range d.v.members {
		path := m.name
		if d.path != "" {
			path = d.path + "." + m.name
		}
		for _, prev := range d.v.members[:i] {
			if prev.name == m.name {
				d.child(m.value, path).fail("repeated member")
				return
			}
		}
		if !field(d.child(m.value, path), m.name) {
			d.child(m.value, path).fail("unknown member")
		}
		if *d.err != nil {
			return
		}
	}
}

// array decodes each item of an array with item; it reports false when
// the value is null (or an error), so that the caller can tell an absent
// array from an empty one, as encoding/json does.
func (d *decoder) array(item func(d *decoder)) bool {
	if !d.want(jsonArray) {
		return false
	}
	for i, v := range d.v.items {
		item(d.child(v, d.path+"["+strconv.Itoa(i)+"]"))
		if *d.err != nil {
			return false
		}
	}
	return true
}

func (d *decoder) str(dst *string) {
	if d.want(jsonString) {
		*dst = d.v.text
	}
}

func (d *decoder) bool(dst *bool) {
	if d.want(jsonBool) {
		*dst = d.v.boolean
	}
}

func (d *decoder) int64(dst *int64) {
	if !d.want(jsonNumber) {
		return
	}
	lit := d.v.text
	if strings.ContainsAny(lit, ".eE") {
		d.fail(lit + ": want an integer")
		return
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		d.fail(lit + ": out of the range of a 64-bit integer")
		return
	}
	*dst = n
}

func (d *decoder) int(dst *int) {
	var n int64
	d.int64(&n)
	*dst = int(n)
}
