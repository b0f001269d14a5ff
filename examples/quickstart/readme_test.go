// Package quickstart holds the README's quick starts as complete programs,
// so that the build keeps them compiling, and checks that the README shows
// them as they are.
package quickstart

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// sourceMark precedes a Go block of the README that must equal a file of
// the repository: <!-- source: path/from/the/root -->.
var sourceMark = regexp.MustCompile("(?s)<!-- source: (\\S+) -->\\s*```go\\n(.*?)```")

// TestREADMEShowsTheCompiledPrograms: every Go block of README.md is marked
// with the file it shows, and equals that file, which the build compiles.
func TestREADMEShowsTheCompiledPrograms(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if os.IsNotExist(err) {
		t.Skip("README.md is not beside this module: not a checkout of the repository")
	}
	if err != nil {
		t.Fatal(err)
	}
	blocks := bytes.Count(readme, []byte("```go\n"))
	marked := sourceMark.FindAllSubmatch(readme, -1)
	if len(marked) != blocks || blocks == 0 {
		t.Fatalf("README.md has %d Go blocks, %d marked with <!-- source: file -->: mark every block with the file it shows", blocks, len(marked))
	}
	for _, m := range marked {
		path, shown := string(m[1]), m[2]
		want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			t.Errorf("README.md shows %s: %v", path, err)
			continue
		}
		if !bytes.Equal(shown, want) {
			t.Errorf("README.md's block for %s differs from the file: copy the file into the README", path)
		}
	}
}

// TestDocsShowTheCompiledPrograms: a Go block of docs/ marked with the file
// it shows (<!-- source: path -->) equals that file.
func TestDocsShowTheCompiledPrograms(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Skip("docs/ is not beside this module: not a checkout of the repository")
	}
	marked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range sourceMark.FindAllSubmatch(b, -1) {
			marked++
			want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(string(m[1]))))
			if err != nil {
				t.Errorf("%s shows %s: %v", filepath.Base(page), m[1], err)
				continue
			}
			if !bytes.Equal(m[2], want) {
				t.Errorf("%s's block for %s differs from the file: copy the file into the page", filepath.Base(page), m[1])
			}
		}
	}
	if marked == 0 {
		t.Fatal("no marked Go block in docs/: docs/security.md shows examples/quickstart/production")
	}
}
