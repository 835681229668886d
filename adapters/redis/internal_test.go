package redis

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
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

// Each return code maps to its error; an unknown code is an internal error
// that names it and claims no known outcome.
func TestReturnCodesMapToTheirErrors(t *testing.T) {
	cases := []struct {
		code   int64
		detail []string
		want   error
	}{
		{codeInvalidArgument, []string{"lease x"}, core.ErrInvalidArgument},
		{codeStaleClaim, []string{"missing"}, core.ErrStaleClaim},
		{codeStaleClaim, []string{"token"}, core.ErrStaleClaim},
		{codeStaleClaim, []string{"version"}, core.ErrStaleClaim},
		{codeNotFound, nil, core.ErrNotFound},
		{codeTransition, []string{"failed"}, core.ErrInvalidTransition},
		{codeTransition, []string{"bogus"}, core.ErrCorrupt},
		{codeExists, nil, core.ErrConflict},
		{codeVersionConflict, []string{"7"}, core.ErrConflict},
		{codeQueueFull, []string{"3"}, core.ErrQueueFull},
		{codeCorrupt, []string{"k", "bad"}, core.ErrCorrupt},
		{codeExhausted, []string{"68719476735"}, ErrSequenceExhausted},
	}
	for _, c := range cases {
		err := codeError(ackScript, c.code, "t1", c.detail)
		if !errors.Is(err, c.want) {
			t.Errorf("code %d %v: %v, want %v", c.code, c.detail, err, c.want)
		}
	}
	var te *model.TransitionError
	if err := codeError(ackScript, codeTransition, "t1", []string{"failed"}); !errors.As(err, &te) || te.Op != model.OpAck || te.State != model.Failed {
		t.Errorf("transition code: %v, want Ack not allowed from failed", err)
	}
	err := codeError(ackScript, 42, "t1", []string{"x"})
	if err == nil || !strings.Contains(err.Error(), "unknown code 42") || !strings.Contains(err.Error(), "ack.lua") {
		t.Errorf("unknown code: %v, want an internal error naming code 42 and the script", err)
	}
	for _, k := range []error{core.ErrStaleClaim, core.ErrNotFound, core.ErrInvalidTransition, core.ErrInvalidArgument, core.ErrConflict, core.ErrQueueFull, core.ErrCorrupt, core.ErrClosed} {
		if errors.Is(err, k) {
			t.Errorf("unknown code maps to %v", k)
		}
	}
}

// A reply that does not decode is an error, never a panic. A task packed
// in either form (the values one after the other, or the array earlier
// versions wrote) decodes the same.
func TestMalformedRepliesDoNotDecode(t *testing.T) {
	fields := []any{"p", int64(0), "ready", int64(0), int64(1), int64(3), int64(0), int64(1000), false, false, false, false, "", "", "3153600000000000000"}
	good := []string{"t1", PackValues(fields)}
	for _, form := range []struct {
		name string
		pack func([]any) string
	}{{"values", PackValues}, {"array", PackArray}} {
		pack := form.pack
		if task, err := decodeTask("q", []string{"t1", pack(fields)}); err != nil || string(task.Payload) != "p" || task.Version != 3 || task.Timeout != model.MaxDuration {
			t.Fatalf("%s: good task: %+v, %v", form.name, task, err)
		}
		// A record of the layout before the attempt timeout: timeout 0.
		if task, err := decodeTask("q", []string{"t1", pack(fields[:14])}); err != nil || task.Version != 3 || task.Timeout != 0 {
			t.Fatalf("%s: 14-field task: %+v, %v", form.name, task, err)
		}
		bads := []struct {
			i int
			v any
		}{{0, int64(1)}, {1, "0"}, {2, "nope"}, {3, int64(-1)}, {4, int64(0)}, {5, int64(0)}, {6, 1.5}, {7, false}, {8, true},
			{10, uint64(1) << 63}, {12, "1 2 0 5:ab"}, {13, false},
			{14, "0"}, {14, "-1"}, {14, "01"}, {14, "1.5"}, {14, int64(5)}, {14, false}, {14, "3153600000000000001"}, {14, "99999999999999999999"}}
		for _, b := range bads {
			bad := append([]any(nil), fields...)
			bad[b.i] = b.v
			if _, err := decodeTask("q", []string{"t1", pack(bad)}); !errors.Is(err, core.ErrCorrupt) {
				t.Errorf("%s: field %d = %v: %v, want ErrCorrupt", form.name, b.i, b.v, err)
			}
		}
		for _, packed := range []string{"", "x", pack(fields[:13]), pack(append(fields[:15:15], "")), pack(fields)[:20], pack(fields) + "\xa0", "\xdc\xff\xff", "\x91\xc1",
			PackArray(fields) + PackValues(fields[:1]), PackValues(fields[:1]) + PackArray(fields[1:])} {
			if _, err := decodeTask("q", []string{"t1", packed}); !errors.Is(err, core.ErrCorrupt) {
				t.Errorf("%s: packed value %q: %v, want ErrCorrupt", form.name, packed, err)
			}
		}
		long := strings.Repeat("x", 70000)
		for _, f := range [][]any{fields, {long, "", strings.Repeat("y", 300), int64(-5), int64(-200), int64(1) << 40, 0.5, true}} {
			got, ok := unpackValues(pack(f))
			if !ok || !slices.Equal(got, f) {
				t.Errorf("%s: unpack(pack(%v)) = %v, %v", form.name, len(f), len(got), ok)
			}
		}
	}
	if _, err := decodeTasks("q", good[:1]); err == nil {
		t.Error("a short task decoded")
	}
	errs, err := decodeErrors("t1", "1 1000 0 3:a:b2 -5 1 0:")
	if err != nil || len(errs) != 2 || errs[0].Message != "a:b" || errs[1].At.UnixMicro() != -5 || !errs[1].LeaseExpired || errs[1].Attempt != 2 {
		t.Errorf("decodeErrors = %+v, %v", errs, err)
	}
}
