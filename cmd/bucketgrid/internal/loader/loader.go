// Package loader reads the rate-limit configuration files and reloads them
// when they change: a file, or every *.yaml and *.yml file of a directory,
// polled at an interval. A reload that fails keeps the configuration in
// force and reports why, once per distinct content.
package loader

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// maxFileBytes bounds one configuration file.
const maxFileBytes = 16 << 20

// Loader loads the files of Paths with Options.
type Loader struct {
	// Paths are files and directories; a directory contributes its
	// regular *.yaml and *.yml files (not those of subdirectories), in
	// name order.
	Paths   []string
	Options policy.Options

	last [sha256.Size]byte // contents of the last load attempted
}

// ErrNoFiles is returned when Paths name no configuration file.
var ErrNoFiles = errors.New("no configuration files (*.yaml, *.yml) found")

// read returns the files of l.Paths and the hash of their names and
// contents.
func (l *Loader) read() ([]rulefile.File, [sha256.Size]byte, error) {
	var files []rulefile.File
	h := sha256.New()
	for _, p := range l.Paths {
		names, err := list(p)
		if err != nil {
			return nil, [sha256.Size]byte{}, err
		}
		for _, name := range names {
			data, err := readFile(name)
			if err != nil {
				return nil, [sha256.Size]byte{}, err
			}
			files = append(files, rulefile.File{Name: name, Data: data})
			fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(data))
			h.Write(data)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if len(files) == 0 {
		return nil, sum, ErrNoFiles
	}
	return files, sum, nil
}

func list(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if strings.HasPrefix(e.Name(), ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		name := filepath.Join(p, e.Name())
		regular := e.Type().IsRegular()
		if e.Type()&fs.ModeSymlink != 0 {
			// A Kubernetes ConfigMap volume holds each key as a symlink
			// into a hidden folder that it swaps on every update.
			st, err := os.Stat(name)
			regular = err == nil && st.Mode().IsRegular()
		}
		if regular {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", name, fs.ErrInvalid, maxFileBytes)
	}
	return data, nil
}

// Load reads and loads the files now.
func (l *Loader) Load() (*policy.Rules, error) {
	files, sum, err := l.read()
	if err != nil {
		return nil, err
	}
	l.last = sum
	return rulefile.Load(files, l.Options)
}

// Watch polls the files every interval until ctx ends. When their names or
// contents differ from the last load attempted, and have held still for one
// poll (so a file caught half-written is not loaded), it loads them and
// calls loaded with the new configuration, or failed with the reason it
// keeps the old one. Files that cannot be read are reported once per
// distinct error. It is not safe to call Load or Watch concurrently.
func (l *Loader) Watch(ctx context.Context, interval time.Duration, loaded func(*policy.Rules), failed func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastReadErr string
	var seen [sha256.Size]byte // contents of the previous poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		files, sum, err := l.read()
		if err != nil {
			if err.Error() != lastReadErr {
				lastReadErr = err.Error()
				failed(err)
			}
			continue
		}
		lastReadErr = ""
		prev := seen
		seen = sum
		if sum == l.last || sum != prev {
			continue
		}
		l.last = sum
		cfg, err := rulefile.Load(files, l.Options)
		if err != nil {
			failed(err)
			continue
		}
		loaded(cfg)
	}
}
