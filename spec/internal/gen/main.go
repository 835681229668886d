// Command gen writes SPEC.md, the specification rendered from the model's
// transition table and the scenarios of package spec. It runs from
// `go generate ./spec` (`make spec`).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/leasehold/leasehold/spec"
)

func main() {
	out := flag.String("o", "SPEC.md", "file to write")
	flag.Parse()
	if err := os.WriteFile(*out, spec.Document(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
