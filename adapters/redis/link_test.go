package redis

import (
	"strings"
	"testing"
)

// link includes a library block exactly when the body uses it, directly or
// through another block, and keeps the library's order.
func TestLinkIncludesWhatABodyUses(t *testing.T) {
	lib := splitLib("-- header\nlocal A, B = 1, 2\nlocal function f() return A end\n-- about g\nlocal function g() return f() end\nlocal function h() return B end\n")
	if len(lib) != 4 || strings.Join(lib[0].names, ",") != "A,B" || lib[2].names[0] != "g" {
		t.Fatalf("split into %+v", lib)
	}
	got := link(lib, "return g()")
	want := "local A, B = 1, 2\nlocal function f() return A end\nlocal function g() return f() end\n\nreturn g()"
	if got != want {
		t.Errorf("link(g) =\n%s\nwant\n%s", got, want)
	}
	if got := link(lib, "return 1"); got != "\nreturn 1" {
		t.Errorf("link of a body using nothing = %q", got)
	}
}

// Every definition of lua/lib.lua is used by some script, and no script
// carries the whole library.
func TestEveryLibraryDefinitionIsUsed(t *testing.T) {
	var total int
	for _, b := range libBlocks {
		total += len(b.text)
	}
	used := map[string]bool{}
	for _, sc := range allScripts {
		body, err := luaFiles.ReadFile("lua/" + sc.name)
		if err != nil {
			t.Fatal(err)
		}
		linked := link(libBlocks, string(body))
		t.Logf("%-20s %5d bytes of library", sc.name, len(linked)-len(body)-1)
		for _, b := range libBlocks {
			if strings.Contains(linked, b.text) {
				for _, n := range b.names {
					used[n] = true
				}
			}
		}
	}
	for _, b := range libBlocks {
		for _, n := range b.names {
			if !used[n] {
				t.Errorf("lua/lib.lua defines %s, which no script uses", n)
			}
		}
	}
}
