// Package doccheck holds the tests that keep the docs and the code
// agreeing where no package owns the link between them.
package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDesignPointers: every "(docs/DESIGN.md, <title>)" in a Go comment or
// a doc names an entry of docs/DESIGN.md, so that a reason pointed to is
// never missing.
func TestDesignPointers(t *testing.T) {
	design, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	titles := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (.+)$`).FindAllStringSubmatch(string(design), -1) {
		titles[m[1]] = true
	}
	// A pointer may run over several comment lines: join them first.
	pointer := regexp.MustCompile(`docs/DESIGN\.md,\s+([^)]+)\)`)
	comment := regexp.MustCompile(`(?m)^\s*//\s?`)
	found := 0
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "out") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := strings.Join(strings.Fields(comment.ReplaceAllString(string(b), " ")), " ")
		for _, m := range pointer.FindAllStringSubmatch(text, -1) {
			for _, title := range strings.Split(m[1], "; ") { // several entries at once
				found++
				if title = strings.TrimSpace(title); !titles[title] {
					t.Errorf("%s points to docs/DESIGN.md, %q: no such entry", path, title)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no pointer to docs/DESIGN.md found: the walk looked in the wrong place")
	}
}
