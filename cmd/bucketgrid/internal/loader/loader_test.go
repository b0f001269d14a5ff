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

// TestConfigMapVolume: a Kubernetes ConfigMap volume holds each key as a
// symlink (shop.yaml → ..data/shop.yaml, ..data → a hidden folder of this
// version); an update swaps ..data. Both versions load.
func TestConfigMapVolume(t *testing.T) {
	dir := t.TempDir()
	version := func(name, domain string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "shop.yaml"), strings.ReplaceAll(good, "domain: d", "domain: "+domain))
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_12_03_v1", "one")
	if err := os.Symlink(filepath.Join("..data", "shop.yaml"), filepath.Join(dir, "shop.yaml")); err != nil {
		t.Fatal(err)
	}
	l := &Loader{Paths: []string{dir}}
	for _, want := range []string{"one", "two"} {
		if want == "two" {
			version("..2026_12_03_v2", "two")
		}
		cfg, err := l.Load()
		if err != nil {
			t.Fatalf("version %s: %v", want, err)
		}
		if !cfg.HasDomain(want) || cfg.Domains() != 1 {
			t.Fatalf("version %s: %d domains, has %s: %v", want, cfg.Domains(), want, cfg.HasDomain(want))
		}
	}
}
