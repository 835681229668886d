package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// redisServer is a private redis-server on a free loopback port, without
// persistence (--save "" --appendonly no), killed by stop and, on Linux, when
// this process dies.
type redisServer struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	out    bytes.Buffer
}

func startRedis(ctx context.Context) (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (apt-get install redis-server), or pass -redis URL: %w", err)
	}
	var last error
	for range 3 { // the free port may be taken between the probe and the start
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan struct{})}
		s.cmd = exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no")
		s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
		setParentDeathSignal(s.cmd)
		if err := s.cmd.Start(); err != nil {
			return nil, err
		}
		go func() { _ = s.cmd.Wait(); close(s.exited) }()
		if last = s.waitReady(ctx); last == nil {
			return s, nil
		}
		s.stop()
	}
	return nil, last
}

func (s *redisServer) url() string { return "redis://" + s.addr + "/0" }

func (s *redisServer) waitReady(ctx context.Context) error {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("redis-server exited: %s", s.out.String())
		default:
		}
		if err := c.Ping(ctx).Err(); err == nil {
			return nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server on %s did not answer PING: %w", s.addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}
