package mutants

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

//go:embed *.patch
var patchFiles embed.FS

// Patch is one mutant of one adapter: a unified diff against the module's
// source, as git diff writes it (paths a/... and b/... from the module
// root), after a line of comment.
type Patch struct {
	Mutant  Mutant
	Adapter string // its target: one of Adapters (an adapter, or Core)
	File    string // the patch's file name in this package
	Diff    []byte
}

// ID names the patch: "<mutant>/<adapter>".
func (p Patch) ID() string { return p.Mutant.Name + "/" + p.Adapter }

// Files returns the paths, relative to the module root, that the patch
// changes.
func (p Patch) Files() []string {
	var out []string
	for line := range strings.Lines(string(p.Diff)) {
		if rest, ok := strings.CutPrefix(line, "+++ b/"); ok {
			out = append(out, strings.TrimRight(rest, "\r\n"))
		}
	}
	return out
}

// Patches returns every patch of the catalogue, in catalogue order, then
// adapter order. It fails when a patch file names no mutant of the
// catalogue or no adapter, or changes no file.
func Patches() ([]Patch, error) {
	entries, err := fs.ReadDir(patchFiles, ".")
	if err != nil {
		return nil, err
	}
	var out []Patch
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".patch")
		if !ok {
			continue
		}
		mutant, adapter, ok := cutLast(name, ".")
		if !ok || !slices.Contains(Adapters, adapter) {
			return nil, fmt.Errorf("mutants: %s: want <mutant>.<target>.patch with a target of %v", e.Name(), Adapters)
		}
		i := slices.IndexFunc(Catalogue, func(m Mutant) bool { return m.Name == mutant })
		if i < 0 {
			return nil, fmt.Errorf("mutants: %s: no mutant %q in the catalogue", e.Name(), mutant)
		}
		if !slices.Contains(Catalogue[i].Targets, adapter) {
			return nil, fmt.Errorf("mutants: %s: mutant %s has no target %s (its targets: %v)", e.Name(), mutant, adapter, Catalogue[i].Targets)
		}
		diff, err := patchFiles.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		p := Patch{Mutant: Catalogue[i], Adapter: adapter, File: e.Name(), Diff: diff}
		if len(p.Files()) == 0 {
			return nil, fmt.Errorf("mutants: %s changes no file", e.Name())
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Patch) int {
		ia := slices.IndexFunc(Catalogue, func(m Mutant) bool { return m.Name == a.Mutant.Name })
		ib := slices.IndexFunc(Catalogue, func(m Mutant) bool { return m.Name == b.Mutant.Name })
		if ia != ib {
			return ia - ib
		}
		return slices.Index(Adapters, a.Adapter) - slices.Index(Adapters, b.Adapter)
	})
	return out, nil
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// Select returns the patches whose mutant is named in only (all when only
// is empty) and whose target is one of the comma-separated targets of
// adapter ("" or "all": every target). It fails on a name that is not in
// the catalogue, or a target that is not in Adapters.
func Select(patches []Patch, only []string, adapter string) ([]Patch, error) {
	for _, n := range only {
		if !slices.ContainsFunc(Catalogue, func(m Mutant) bool { return m.Name == n }) {
			return nil, fmt.Errorf("mutants: no mutant %q in the catalogue", n)
		}
	}
	var targets []string
	if adapter != "" && adapter != "all" {
		targets = strings.Split(adapter, ",")
	}
	for _, t := range targets {
		if !slices.Contains(Adapters, t) {
			return nil, fmt.Errorf("mutants: no target %q (want some of %v, or all)", t, Adapters)
		}
	}
	var out []Patch
	for _, p := range patches {
		if (len(only) == 0 || slices.Contains(only, p.Mutant.Name)) &&
			(len(targets) == 0 || slices.Contains(targets, p.Adapter)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ModuleRoot returns the directory holding the go.mod of dir or of its
// closest parent that has one.
func ModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("mutants: no go.mod in %s or above", dir)
		}
	}
}

// CopyModule copies the module at root to dst (which must not exist, or be
// empty): every directory and regular file but .git.
func CopyModule(root, dst string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return copyFile(path, target)
		}
		return nil // sockets, symlinks and the like are not source
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Apply applies the patch to the module copy at dir, with git apply (or
// patch -p1 when git is not installed). With check set it only checks that
// the patch applies and changes nothing.
func Apply(dir string, p Patch, check bool) error {
	var cmd *exec.Cmd
	if _, err := exec.LookPath("git"); err == nil {
		args := []string{"apply", "--whitespace=nowarn"}
		if check {
			args = append(args, "--check")
		}
		cmd = exec.Command("git", args...)
		// dir is not a repository; keep git from finding one above it,
		// which would make it read the paths against that one's root.
		cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	} else {
		args := []string{"-p1", "--forward", "--batch", "--silent"}
		if check {
			args = append(args, "--dry-run")
		}
		cmd = exec.Command("patch", args...)
	}
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(p.Diff)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("mutants: %s does not apply (regenerate it against the current source): %v\n%s", p.File, err, out)
	}
	return nil
}

// CheckApplies checks that the patch applies to the module at root, without
// changing it: the files the patch changes are copied to a temporary
// directory and the patch is applied there.
func CheckApplies(root string, p Patch) error {
	tmp, err := os.MkdirTemp("", "leasehold-mutant-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, f := range p.Files() {
		if !filepath.IsLocal(f) {
			return fmt.Errorf("mutants: %s changes %q, outside the module", p.File, f)
		}
		dst := filepath.Join(tmp, "module", f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := copyFile(filepath.Join(root, f), dst); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("mutants: %s changes %s, which no longer exists", p.File, f)
			}
			return err
		}
	}
	return Apply(filepath.Join(tmp, "module"), p, true)
}
