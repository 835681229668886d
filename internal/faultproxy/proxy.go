// Package faultproxy is a fault-injecting TCP proxy for tests.
//
// A Proxy listens on a free loopback port and forwards every connection it
// accepts to one target address. Between the two ends it can delay traffic,
// drop the next request before the server sees it, drop the next reply after
// the server ran the request, hold all traffic for a while, or cut every open
// connection at once. It uses the standard library only.
//
// The proxy works at chunk granularity: a chunk is whatever one Read of one
// side returns. A client that writes one command per call (as Redis clients
// do: the RESP encoding of one call, or of one pipeline, is written at once)
// usually arrives as one chunk, and so does the server's reply; but the
// kernel may split a large write or merge two small ones, and a fault always
// applies to a whole chunk, never to part of one.
//
// Faults armed with CutBeforeRequest and CutAfterReply are one-shot and
// queue up: arming twice cuts the next two matching chunks, on whichever
// connections they travel.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds how long the proxy waits to connect to the target.
const dialTimeout = 5 * time.Second

// chunkSize is the size of the read buffer of each direction.
const chunkSize = 64 << 10

// Stats counts what a Proxy has done since New.
type Stats struct {
	// Connections is the number of client connections accepted.
	Connections int64
	// Open is the number of connection pairs open now.
	Open int64
	// DialFailures counts accepted connections whose target dial failed
	// (the client connection was closed at once).
	DialFailures int64
	// ChunksUp and ChunksDown count the chunks forwarded client->server and
	// server->client; BytesUp and BytesDown their bytes.
	ChunksUp, ChunksDown int64
	BytesUp, BytesDown   int64
	// CutsBeforeRequest counts client->server chunks dropped by
	// CutBeforeRequest (each closed its connection).
	CutsBeforeRequest int64
	// CutsAfterReply counts server->client chunks dropped by CutAfterReply
	// (each closed its connection).
	CutsAfterReply int64
	// CutAllConns counts the connections closed by CutAll.
	CutAllConns int64
	// Blackholes counts the calls of Blackhole.
	Blackholes int64
	// HeldChunks counts the chunks held back by a blackhole before being
	// delivered.
	HeldChunks int64
}

// Proxy is a fault-injecting TCP proxy. Its methods are safe for concurrent
// use.
type Proxy struct {
	target atomic.Pointer[string] // host:port, read per accepted connection
	ln     net.Listener

	delay atomic.Int64 // time.Duration

	mu             sync.Mutex
	closed         bool
	conns          map[*pair]struct{}
	cutBefore      int       // armed CutBeforeRequest faults
	cutAfter       int       // armed CutAfterReply faults
	blackholeUntil time.Time // traffic is held until then
	blackholeWake  chan struct{}
	stats          Stats

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// pair is one client connection and its server connection.
type pair struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the pair is closed
}

func (c *pair) close() bool {
	closed := false
	c.once.Do(func() {
		closed = true
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
	})
	return closed
}

// New starts a proxy listening on 127.0.0.1 on a free port that forwards
// every connection to target (host:port). The target is dialled once per
// accepted connection, not by New.
func New(target string) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("faultproxy: empty target address")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		ln:            ln,
		conns:         make(map[*pair]struct{}),
		blackholeWake: make(chan struct{}),
		done:          make(chan struct{}),
	}
	p.target.Store(&target)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's listening address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return *p.target.Load() }

// SetTarget makes the proxy forward the connections it accepts from now on
// to target (host:port), as a DNS name or a virtual IP moved to a promoted
// replica would; open connections keep their server (CutAll ends them).
func (p *Proxy) SetTarget(target string) { p.target.Store(&target) }

// Close stops accepting, closes every open connection and waits until every
// goroutine of the proxy has returned. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

// SetDelay makes the proxy wait d before forwarding each chunk, in both
// directions; 0 (or a negative d) turns the delay off. Chunks of one
// direction of one connection stay in order.
func (p *Proxy) SetDelay(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.delay.Store(int64(d))
}

// CutBeforeRequest arms a one-shot fault: the next client->server chunk is
// dropped and its connection closed, so the server never sees the request
// and the client sees its connection drop.
func (p *Proxy) CutBeforeRequest() {
	p.mu.Lock()
	p.cutBefore++
	p.mu.Unlock()
}

// CutAfterReply arms a one-shot fault: the next server->client chunk is
// dropped and its connection closed, so the server ran the request but the
// client never hears the reply.
func (p *Proxy) CutAfterReply() {
	p.mu.Lock()
	p.cutAfter++
	p.mu.Unlock()
}

// Disarm cancels every armed CutBeforeRequest and CutAfterReply fault that
// has not fired yet and ends a blackhole early.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	p.cutBefore, p.cutAfter = 0, 0
	p.endBlackholeLocked()
	p.mu.Unlock()
}

// Blackhole holds all traffic, both directions, for d from now: every chunk
// read in that time is held back and delivered, in order, when the blackhole
// ends (connections stay open; a client whose deadline passes meanwhile sees
// a timeout and usually closes its connection, and the held bytes then go
// nowhere). Bytes already forwarded are not affected. A later call replaces
// the end time.
func (p *Proxy) Blackhole(d time.Duration) {
	p.mu.Lock()
	p.endBlackholeLocked()
	p.blackholeUntil = time.Now().Add(d)
	p.stats.Blackholes++
	p.mu.Unlock()
}

func (p *Proxy) endBlackholeLocked() {
	p.blackholeUntil = time.Time{}
	close(p.blackholeWake)
	p.blackholeWake = make(chan struct{})
}

// CutAll closes every connection open now. New connections are accepted as
// usual afterwards.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	n := int64(0)
	for _, c := range conns {
		if c.close() {
			n++
		}
	}
	p.mu.Lock()
	p.stats.CutAllConns += n
	p.mu.Unlock()
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Open = int64(len(p.conns))
	return s
}

func (p *Proxy) takeConnsLocked() []*pair {
	conns := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
		delete(p.conns, c)
	}
	return conns
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // listener closed
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		p.stats.Connections++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(client)
	}
}

// serve dials the target for one accepted client and runs both directions.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	dialDone := make(chan struct{})
	var server net.Conn
	var err error
	go func() {
		defer close(dialDone)
		server, err = d.Dial("tcp", p.Target())
	}()
	select {
	case <-dialDone:
	case <-p.done:
		<-dialDone
		if err == nil {
			_ = server.Close()
		}
		_ = client.Close()
		return
	}
	if err != nil {
		p.mu.Lock()
		p.stats.DialFailures++
		p.mu.Unlock()
		_ = client.Close()
		return
	}
	c := &pair{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(c, true) }()
	go func() { defer wg.Done(); p.pump(c, false) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pump forwards one direction of c until either side fails or c is closed.
// up is the client->server direction.
func (p *Proxy) pump(c *pair, up bool) {
	defer c.close()
	src, dst := c.server, c.client
	if up {
		src, dst = c.client, c.server
	}
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.forward(c, dst, buf[:n], up) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forward applies the faults to one chunk and writes it to dst unless it
// is dropped. It reports whether the pump should go on.
func (p *Proxy) forward(c *pair, dst net.Conn, chunk []byte, up bool) bool {
	if !p.holdWhileBlackholed(c) {
		return false
	}
	if d := time.Duration(p.delay.Load()); d > 0 {
		if !sleep(d, c.done) {
			return false
		}
	}
	p.mu.Lock()
	cut := false
	if up && p.cutBefore > 0 {
		p.cutBefore--
		p.stats.CutsBeforeRequest++
		cut = true
	} else if !up && p.cutAfter > 0 {
		p.cutAfter--
		p.stats.CutsAfterReply++
		cut = true
	}
	if !cut {
		if up {
			p.stats.ChunksUp++
			p.stats.BytesUp += int64(len(chunk))
		} else {
			p.stats.ChunksDown++
			p.stats.BytesDown += int64(len(chunk))
		}
	}
	p.mu.Unlock()
	if cut {
		c.close()
		return false
	}
	_, err := dst.Write(chunk)
	return err == nil
}

// holdWhileBlackholed waits while a blackhole is on. It reports false when
// c was closed meanwhile.
func (p *Proxy) holdWhileBlackholed(c *pair) bool {
	held := false
	for {
		p.mu.Lock()
		until, wake := p.blackholeUntil, p.blackholeWake
		wait := time.Until(until)
		if wait <= 0 {
			if held {
				p.stats.HeldChunks++
			}
			p.mu.Unlock()
			return true
		}
		p.mu.Unlock()
		held = true
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-wake:
			t.Stop()
		case <-c.done:
			t.Stop()
			return false
		}
	}
}

// sleep waits d or until done is closed; it reports whether d passed.
func sleep(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
