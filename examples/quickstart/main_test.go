package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The README shows this program's run function verbatim, so its example
// compiles and does what it says.
func TestTheReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(src), "func run() error {")
	if start < 0 {
		t.Fatal("main.go has no run function")
	}
	body := string(src[start:])
	if !strings.Contains(string(readme), "```go\n"+body+"```\n") {
		t.Errorf("README.md's short example is not main.go's run function as it stands; paste it from examples/quickstart/main.go")
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
