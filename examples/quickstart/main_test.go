package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goBlocks returns the Go snippets of the README, in order.
func goBlocks(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```\n").FindAllStringSubmatch(string(readme), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal("README.md has no Go snippet")
	}
	return out
}

// The README's first example is this program, whole, so it compiles and does
// what it says.
func TestTheReadmeShowsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if goBlocks(t)[0] != string(src) {
		t.Errorf("README.md's short example is not examples/quickstart/main.go as it stands; paste the file")
	}
}

// Every Go snippet of the README is the text of a program under examples/ or
// of a file of Example functions, which `make test` builds.
func TestEveryGoSnippetOfTheReadmeIsBuiltCode(t *testing.T) {
	var sources []string
	for _, pattern := range []string{"../*/*.go", "../../core/example_test.go", "../../adapters/*/example_test.go"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sources = append(sources, string(b))
		}
	}
	for i, block := range goBlocks(t) {
		found := false
		for _, src := range sources {
			if strings.Contains(src, block) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README Go snippet %d is not the text of any program under examples/ or Example file:\n%s", i+1, block)
		}
	}
}

// The README's first example, copied into a module of its own that requires
// leasehold (replaced by this checkout), builds and runs off the network.
func TestTheReadmeExampleBuildsAndRunsInANewModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: skipped with -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.go", goBlocks(t)[0])
	write("go.mod", "module example.com/newcomer\n\ngo 1.26\n\nrequire github.com/leasehold/leasehold v0.0.0\n\nreplace github.com/leasehold/leasehold => "+root+"\n")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
	bin := filepath.Join(dir, "newcomer")
	build := exec.CommandContext(ctx, gobin, "build", "-o", bin, ".")
	build.Dir, build.Env = dir, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the README's example in a new module: %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, bin)
	run.Dir = dir
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's example: %v\n%s", err, out)
	}
	for _, want := range []string{`sending "welcome ada" under token`, `: succeeded, result "sent"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTheProgramRunsTheTaskToSuccess(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	runErr := run()
	os.Stdout = stdout
	w.Close()
	var out bytes.Buffer
	io.Copy(&out, r)
	if runErr != nil {
		t.Fatalf("run: %v\n%s", runErr, out.String())
	}
	for _, want := range []string{`sending "welcome ada" under token`, `: succeeded, result "sent"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
