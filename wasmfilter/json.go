package wasmfilter

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON reader for the plugin configuration. encoding/json (and the
// reflection it needs) was a fifth of filter.wasm; this reader accepts
// exactly RFC 8259 JSON, keeps object members in order with their offsets,
// and leaves typing to the configuration decoder, which reports every error
// with the path of the offending value.

type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// jsonValue is a parsed JSON value. A number keeps its literal.
type jsonValue struct {
	kind    jsonKind
	off     int // byte offset of the value in the document
	boolean bool
	text    string // string value, or number literal
	items   []jsonValue
	members []jsonMember
}

type jsonMember struct {
	name  string
	value jsonValue
}

// maxJSONDepth bounds nesting, so a hostile document cannot exhaust the
// stack.
const maxJSONDepth = 32

type jsonParser struct {
	b   []byte
	off int
}

// parseJSON parses one JSON value filling all of b (surrounding whitespace
// allowed). Strings must be valid UTF-8.
func parseJSON(b []byte) (jsonValue, error) {
	p := jsonParser{b: b}
	p.space()
	if p.off == len(b) {
		return jsonValue{}, syntaxErr(0, "empty document")
	}
	v, err := p.value(0)
	if err != nil {
		return v, err
	}
	p.space()
	if p.off != len(b) {
		return v, syntaxErr(p.off, "unexpected "+p.what()+" after the document")
	}
	return v, nil
}

func syntaxErr(off int, msg string) error {
	return &ConfigError{Msg: "JSON syntax error at byte " + strconv.Itoa(off) + ": " + msg}
}

func (p *jsonParser) what() string {
	if p.off >= len(p.b) {
		return "end of document"
	}
	c := p.b[p.off]
	if c < 0x20 || c >= 0x7f {
		return "byte 0x" + strconv.FormatUint(uint64(c), 16)
	}
	return "'" + string(rune(c)) + "'"
}

func (p *jsonParser) space() {
	for p.off < len(p.b) {
		switch p.b[p.off] {
		case ' ', '\t', '\n', '\r':
			p.off++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (jsonValue, error) {
	if depth > maxJSONDepth {
		return jsonValue{}, syntaxErr(p.off, "nested more than "+strconv.Itoa(maxJSONDepth)+" levels")
	}
	v := jsonValue{off: p.off}
	if p.off >= len(p.b) {
		return v, syntaxErr(p.off, "unexpected end of document")
	}
	switch c := p.b[p.off]; {
	case c == '{':
		v.kind = jsonObject
		return v, p.object(&v, depth)
	case c == '[':
		v.kind = jsonArray
		return v, p.array(&v, depth)
	case c == '"':
		v.kind = jsonString
		s, err := p.str()
		v.text = s
		return v, err
	case c == '-' || '0' <= c && c <= '9':
		v.kind = jsonNumber
		s, err := p.number()
		v.text = s
		return v, err
	case p.literal("true"):
		v.kind, v.boolean = jsonBool, true
		return v, nil
	case p.literal("false"):
		v.kind = jsonBool
		return v, nil
	case p.literal("null"):
		return v, nil
	}
	return v, syntaxErr(p.off, "unexpected "+p.what()+", want a value")
}

func (p *jsonParser) literal(word string) bool {
	if len(p.b)-p.off >= len(word) && string(p.b[p.off:p.off+len(word)]) == word {
		p.off += len(word)
		return true
	}
	return false
}

func (p *jsonParser) object(v *jsonValue, depth int) error {
	p.off++ // {
	p.space()
	if p.off < len(p.b) && p.b[p.off] == '}' {
		p.off++
		return nil
	}
	for {
		p.space()
		if p.off >= len(p.b) || p.b[p.off] != '"' {
			return syntaxErr(p.off, "unexpected "+p.what()+", want a member name")
		}
		name, err := p.str()
		if err != nil {
			return err
		}
		p.space()
		if p.off >= len(p.b) || p.b[p.off] != ':' {
			return syntaxErr(p.off, "unexpected "+p.what()+", want ':'")
		}
		p.off++
		p.space()
		val, err := p.value(depth + 1)
		if err != nil {
			return err
		}
		v.members = append(v.members, jsonMember{name: name, value: val})
		p.space()
		if p.off < len(p.b) && p.b[p.off] == ',' {
			p.off++
			continue
		}
		if p.off < len(p.b) && p.b[p.off] == '}' {
			p.off++
			return nil
		}
		return syntaxErr(p.off, "unexpected "+p.what()+", want ',' or '}'")
	}
}

func (p *jsonParser) array(v *jsonValue, depth int) error {
	p.off++ // [
	p.space()
	if p.off < len(p.b) && p.b[p.off] == ']' {
		p.off++
		return nil
	}
	for {
		p.space()
		item, err := p.value(depth + 1)
		if err != nil {
			return err
		}
		v.items = append(v.items, item)
		p.space()
		if p.off < len(p.b) && p.b[p.off] == ',' {
			p.off++
			continue
		}
		if p.off < len(p.b) && p.b[p.off] == ']' {
			p.off++
			return nil
		}
		return syntaxErr(p.off, "unexpected "+p.what()+", want ',' or ']'")
	}
}

// number scans an RFC 8259 number and returns its literal.
func (p *jsonParser) number() (string, error) {
	start := p.off
	digits := func() int {
		n := 0
		for p.off < len(p.b) && '0' <= p.b[p.off] && p.b[p.off] <= '9' {
			p.off++
			n++
		}
		return n
	}
	if p.b[p.off] == '-' {
		p.off++
	}
	switch {
	case p.off < len(p.b) && p.b[p.off] == '0':
		p.off++
	case digits() == 0:
		return "", syntaxErr(p.off, "unexpected "+p.what()+" in a number")
	}
	if p.off < len(p.b) && p.b[p.off] == '.' {
		p.off++
		if digits() == 0 {
			return "", syntaxErr(p.off, "unexpected "+p.what()+" in a number")
		}
	}
	if p.off < len(p.b) && (p.b[p.off] == 'e' || p.b[p.off] == 'E') {
		p.off++
		if p.off < len(p.b) && (p.b[p.off] == '+' || p.b[p.off] == '-') {
			p.off++
		}
		if digits() == 0 {
			return "", syntaxErr(p.off, "unexpected "+p.what()+" in a number")
		}
	}
	return string(p.b[start:p.off]), nil
}

// str scans a string and returns its value.
func (p *jsonParser) str() (string, error) {
	p.off++ // "
	var out []byte
	start := p.off
	for p.off < len(p.b) {
		c := p.b[p.off]
		switch {
		case c == '"':
			s := string(p.b[start:p.off])
			if out != nil {
				s = string(append(out, p.b[start:p.off]...))
			}
			p.off++
			return s, nil
		case c == '\\':
			out = append(out, p.b[start:p.off]...)
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			out = utf8.AppendRune(out, r)
			start = p.off
		case c < 0x20:
			return "", syntaxErr(p.off, "control character "+p.what()+" in a string")
		case c < utf8.RuneSelf:
			p.off++
		default:
			r, n := utf8.DecodeRune(p.b[p.off:])
			if r == utf8.RuneError && n <= 1 {
				return "", syntaxErr(p.off, "invalid UTF-8 in a string")
			}
			p.off += n
		}
	}
	return "", syntaxErr(p.off, "unterminated string")
}

// escape decodes the escape sequence at p.off (the backslash).
func (p *jsonParser) escape() (rune, error) {
	at := p.off
	p.off++
	if p.off >= len(p.b) {
		return 0, syntaxErr(at, "unterminated string")
	}
	c := p.b[p.off]
	p.off++
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return 0, syntaxErr(at, "invalid \\u escape")
		}
		if utf16.IsSurrogate(r) {
			// A pair decodes to one rune; a lone surrogate becomes U+FFFD,
			// as encoding/json decodes it.
			save := p.off
			if p.off+1 < len(p.b) && p.b[p.off] == '\\' && p.b[p.off+1] == 'u' {
				p.off += 2
				if r2, ok := p.hex4(); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						return d, nil
					}
				}
			}
			p.off = save
			return utf8.RuneError, nil
		}
		return r, nil
	}
	return 0, syntaxErr(at, "invalid escape \\"+string(rune(c)))
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.b)-p.off < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.off : p.off+4] {
		d, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	p.off += 4
	return r, true
}

// unhex returns the value of the hexadecimal digit c.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
