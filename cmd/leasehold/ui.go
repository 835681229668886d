package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/leasehold/leasehold/adapters/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/webui"
	"github.com/leasehold/leasehold/model"
)

// uiFlags are the flags of `leasehold ui`.
type uiFlags struct {
	store       storeFlags
	memory      bool
	addr        string
	allowRemote bool
}

func parseUIFlags(args []string, stderr io.Writer) (*uiFlags, error) {
	f := &uiFlags{}
	fs := flag.NewFlagSet("leasehold ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.store.add(fs)
	fs.BoolVar(&f.memory, "memory", false, "serve an in-process memory store holding a few demonstration tasks (gone when the command stops)")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen on `host:port`; a host that is not loopback needs --allow-remote")
	fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow --addr to name a host other than loopback: anyone who reaches it can act on tasks")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: leasehold ui [flags] (--redis URL | --sqlite PATH | --postgres URL | --memory)\n\n")
		fs.PrintDefaults()
		fmt.Fprint(stderr, exitCodes)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	host, _, err := net.SplitHostPort(f.addr)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %v", f.addr, err)
	}
	if !f.allowRemote && !loopback(host) {
		return nil, fmt.Errorf("--addr %q listens beyond this machine; add --allow-remote if that is meant", f.addr)
	}
	if f.memory && (f.store.redis != "" || f.store.sqlite != "" || f.store.postgres != "") {
		return nil, errors.New("name one store: --memory or another")
	}
	return f, nil
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func ui(args []string, stdout, stderr io.Writer) int {
	f, err := parseUIFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasehold ui: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var store core.Store
	if f.memory {
		m := memory.New()
		if err := demoTasks(ctx, m); err != nil {
			fmt.Fprintf(stderr, "leasehold ui: %v\n", err)
			return exitUsage
		}
		store = m
	} else {
		openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		store, err = f.store.open(openCtx)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "leasehold ui: %v\n", err)
			return exitUsage
		}
	}
	defer store.Close()
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold ui: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "leasehold ui: serving on http://%s/ (interrupt to stop)\n", ln.Addr())
	if err := serveUI(ctx, store, ln); err != nil {
		fmt.Fprintf(stderr, "leasehold ui: %v\n", err)
		return exitUsage
	}
	return exitOK
}

// serveUI serves the inspector of store on ln until ctx ends.
func serveUI(ctx context.Context, store core.Store, ln net.Listener) error {
	h, err := webui.New(store)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// demoTasks fills a memory store with tasks in every state, for --memory.
func demoTasks(ctx context.Context, s *memory.Store) error {
	var items []model.EnqueueArgs
	for i := range 120 {
		items = append(items, model.EnqueueArgs{ID: fmt.Sprintf("email-%03d", i), Payload: fmt.Appendf(nil, `{"to":"user%d@example.com"}`, i), MaxAttempts: 3})
	}
	if _, err := s.EnqueueBatch(ctx, core.EnqueueBatchParams{Queue: "emails", Tasks: items}); err != nil {
		return err
	}
	if _, err := s.Enqueue(ctx, core.EnqueueParams{Queue: "reports", EnqueueArgs: model.EnqueueArgs{ID: "monthly", MaxAttempts: 1, RunAfter: time.Now().Add(time.Hour).Truncate(time.Microsecond)}}); err != nil {
		return err
	}
	pop, err := s.Pop(ctx, core.PopParams{Queue: "emails", Lease: time.Hour, N: 12})
	if err != nil {
		return err
	}
	for i, t := range pop.Tasks {
		c := core.Claim{Queue: "emails", TaskID: t.ID, Token: t.ClaimToken, Attempt: t.Attempt, Deadline: t.Deadline}
		switch {
		case i < 5:
			_, err = s.Ack(ctx, core.AckParams{Claim: c, Result: []byte("sent")})
		case i < 7:
			_, err = s.Fail(ctx, core.FailParams{Claim: c, Message: "550 mailbox unavailable"})
		case i < 9:
			_, err = s.Retry(ctx, core.RetryParams{Claim: c, Message: "421 try again later", Delay: 10 * time.Minute})
		}
		if err != nil {
			return err
		}
	}
	return nil
}
