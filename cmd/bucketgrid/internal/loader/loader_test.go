package loader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/policy"
)

const good = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"

// write replaces path's contents atomically, as configuration managers
// (a Kubernetes ConfigMap's symlink swap, an editor's rename) do.
func write(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestLoadPaths(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), good)
	write(t, filepath.Join(dir, "b.YML"), strings.ReplaceAll(good, "domain: d", "domain: e"))
	write(t, filepath.Join(dir, "notes.txt"), "not yaml: [")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	write(t, filepath.Join(dir, "sub", "c.yaml"), "garbage: [")
	single := filepath.Join(t.TempDir(), "one.conf")
	write(t, single, strings.ReplaceAll(good, "domain: d", "domain: f"))

	l := &Loader{Paths: []string{dir, single}}
	cfg, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"d", "e", "f"} {
		if !cfg.HasDomain(d) {
			t.Errorf("domain %s missing", d)
		}
	}
	if cfg.Domains() != 3 {
		t.Errorf("%d domains", cfg.Domains())
	}
	if _, err := (&Loader{Paths: []string{t.TempDir()}}).Load(); !errors.Is(err, ErrNoFiles) {
		t.Errorf("empty directory: %v", err)
	}
	if _, err := (&Loader{Paths: []string{filepath.Join(dir, "missing")}}).Load(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: %v", err)
	}
	write(t, filepath.Join(dir, "a.yaml"), "domain: d\ndescriptors:\n  - value: v\n")
	_, err = l.Load()
	var ce *policy.Error
	if !errors.As(err, &ce) || err.Error() != filepath.Join(dir, "a.yaml")+": descriptor has empty key" {
		t.Errorf("bad file: %v", err)
	}
}

// TestWatch: a change is loaded, a bad change keeps the configuration in
// force and is reported once, and a fix is loaded again.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	write(t, file, good)
	l := &Loader{Paths: []string{dir}}
	if _, err := l.Load(); err != nil {
		t.Fatal(err)
	}
	loaded := make(chan *policy.Rules, 10)
	failed := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		l.Watch(ctx, 5*time.Millisecond, func(c *policy.Rules) { loaded <- c }, func(err error) { failed <- err })
		close(done)
	}()
	defer func() { cancel(); <-done }()
	wait := func() (any, string) {
		t.Helper()
		select {
		case c := <-loaded:
			return c, "loaded"
		case err := <-failed:
			return err, "failed"
		case <-time.After(30 * time.Second):
			t.Fatal("no reload within 30s")
		}
		return nil, ""
	}

	write(t, file, strings.ReplaceAll(good, "domain: d", "domain: d2"))
	if v, what := wait(); what != "loaded" || !v.(*policy.Rules).HasDomain("d2") {
		t.Fatalf("change: %s %v", what, v)
	}
	write(t, file, "domain: d3\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")
	if v, what := wait(); what != "failed" || !strings.Contains(v.(error).Error(), "invalid rate limit unit 'fortnight'") {
		t.Fatalf("bad change: %s %v", what, v)
	}
	// a fix loads; the bad content was reported once
	write(t, file, strings.ReplaceAll(good, "domain: d", "domain: d4"))
	if v, what := wait(); what != "loaded" || !v.(*policy.Rules).HasDomain("d4") {
		t.Fatalf("fix: %s %v", what, v)
	}
	// a new file in the directory is a change too
	write(t, filepath.Join(dir, "b.yaml"), strings.ReplaceAll(good, "domain: d", "domain: other"))
	if v, what := wait(); what != "loaded" || !v.(*policy.Rules).HasDomain("other") {
		t.Fatalf("new file: %s %v", what, v)
	}
	select {
	case err := <-failed:
		t.Fatalf("reported again: %v", err)
	default:
	}
}
