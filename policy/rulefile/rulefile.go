// Package rulefile reads envoyproxy/ratelimit's YAML rule files into
// policy.Rules, rejecting every file that service rejects with its own
// message. It is the YAML half of package policy, kept apart so that what
// links policy alone (the Envoy filter) links no YAML library.
package rulefile

import (
	"fmt"

	"gopkg.in/yaml.v2"

	"github.com/bucketgrid/bucketgrid/internal/ruledoc"
	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile/internal/config"
)

// File is one configuration file: its name, used in error messages, and its
// YAML (or JSON) contents.
type File struct {
	Name string
	Data []byte
}

// Load parses files and compiles them with opts: each file parsed, then
// policy.Compile. The first error is returned as a
// *policy.Error; nothing is partly loaded.
func Load(files []File, opts policy.Options) (*policy.Rules, error) {
	docs := make([]ruledoc.Document, len(files))
	for i, f := range files {
		d, err := parse(f)
		if err != nil {
			// a file before this one may be wrong in a way only Compile
			// sees: report the first error in file order
			if _, cerr := policy.Compile(docs[:i], opts); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		docs[i] = d
	}
	return policy.Compile(docs, opts)
}

// parse reads one file: every mapping key checked (unknown keys, keys that
// are not strings, lists of anything but mappings are refused as
// envoyproxy/ratelimit refuses them), then decoded. Its errors are
// *policy.Error.
func parse(f File) (ruledoc.Document, error) {
	var generic map[interface{}]interface{}
	if err := yaml.Unmarshal(f.Data, &generic); err != nil {
		return ruledoc.Document{}, &policy.Error{File: f.Name, Reason: "error loading config file: " + err.Error()}
	}
	if err := validateKeys(f.Name, generic); err != nil {
		return ruledoc.Document{}, err
	}
	var root config.YamlRoot
	if err := yaml.Unmarshal(f.Data, &root); err != nil {
		return ruledoc.Document{}, &policy.Error{File: f.Name, Reason: "error loading config file: " + err.Error()}
	}
	return ruledoc.Document{Name: f.Name, Domain: root.Domain, Descriptors: nodes(root.Descriptors)}, nil
}

func nodes(ys []config.YamlDescriptor) []ruledoc.Node {
	if len(ys) == 0 {
		return nil
	}
	out := make([]ruledoc.Node, len(ys))
	for i := range ys {
		y := &ys[i]
		n := ruledoc.Node{Key: y.Key, Value: y.Value, Descriptors: nodes(y.Descriptors),
			ShadowMode: y.ShadowMode, QuotaMode: y.QuotaMode, DetailedMetric: y.DetailedMetric,
			ValueToMetric: y.ValueToMetric, ShareThreshold: y.ShareThreshold}
		if r := y.RateLimit; r != nil {
			n.RateLimit = &ruledoc.RateLimit{RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Unlimited: r.Unlimited,
				Name: r.Name, Replaces: r.ReplacesNames(), Algorithm: r.Algorithm, Burst: r.Burst}
		}
		out[i] = n
	}
	return out
}

// validateKeys rejects unknown or non-string keys and lists of anything but
// mappings, anywhere in the document.
func validateKeys(file string, m map[interface{}]interface{}) error {
	for k, v := range m {
		ks, ok := k.(string)
		if !ok {
			return &policy.Error{File: file, Reason: fmt.Sprintf("config error, key is not of type string: %v", k)}
		}
		if !config.ValidKeys[ks] {
			return &policy.Error{File: file, Reason: fmt.Sprintf("config error, unknown key '%s'", ks)}
		}
		switch v := v.(type) {
		case []interface{}:
			for _, e := range v {
				em, ok := e.(map[interface{}]interface{})
				if !ok {
					return &policy.Error{File: file, Reason: fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e)}
				}
				if err := validateKeys(file, em); err != nil {
					return err
				}
			}
		case map[interface{}]interface{}:
			if err := validateKeys(file, v); err != nil {
				return err
			}
		case string, int, bool, nil:
		default:
			return &policy.Error{File: file, Reason: "error checking config"}
		}
	}
	return nil
}
