// Package ruledoc holds the rule documents of envoyproxy/ratelimit's format
// as read and before they are checked: the tree that package rulefile reads
// from YAML and the Envoy filter from its plugin configuration, and that
// policy.Compile validates. It is internal: outside this module rule files
// are loaded with rulefile.Load.
package ruledoc

// Document is one rule file of envoyproxy/ratelimit's format, parsed but
// not yet validated: a domain and its descriptor tree. Package rulefile
// reads it from YAML (or JSON, which is YAML too); the Envoy filter reads it
// from its plugin configuration. policy.Compile validates it.
type Document struct {
	// Name names the document in error messages (a file name).
	Name        string
	Domain      string
	Descriptors []Node
}

// Node is one node of a descriptor tree: a key, optionally a value (a
// trailing '*' makes it a wildcard), optionally a limit, and its children.
type Node struct {
	Key, Value     string
	RateLimit      *RateLimit
	Descriptors    []Node
	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	ValueToMetric  bool
	ShareThreshold bool
}

// RateLimit is a node's limit as written: Unit is a unit name ("minute"),
// Algorithm an algorithm name or empty.
type RateLimit struct {
	RequestsPerUnit uint32
	Unit            string
	Unlimited       bool
	Name            string
	Replaces        []string
	Algorithm       string
	Burst           uint32
}
