package redis

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/model"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// ErrSequenceExhausted is returned when a queue's sequence would pass 2^36,
// the bound that keeps the ready index's scores exact (about 68 billion
// mutations of one queue). The operation changed nothing.
var ErrSequenceExhausted = errors.New("leasehold/redis: queue sequence exhausted")

// versionLimit is 2^36: versions stay below it (see lua/lib.lua).
const versionLimit = 1 << 36

// script is one operation's Lua script: its file, preceded by the parts of
// lua/lib.lua it uses.
type script struct {
	name string
	op   model.Op
	// writes: the call carries a request ID (the last ARGV); memo: it also
	// declares its memo key (the last KEYS), where it remembers its answer.
	writes, memo bool
	fn           string // its function in the library
	body         string // its file, without comment lines
	*goredis.Script
}

// A script's kind: a read; a write, which remembers its answer under a
// memo key so that a retransmission of the call is answered with it; or an
// idempotent write, whose retransmission gets the first answer anyway and
// which keeps no memo.
const (
	read = iota
	memoWrite
	idempotentWrite
)

func loadScript(file string, op model.Op, kind int) *script {
	body, err := luaFiles.ReadFile("lua/" + file)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return &script{name: file, op: op, writes: kind != read, memo: kind == memoWrite,
		body: code(string(body)), Script: goredis.NewScript(link(libBlocks, string(body)))}
}

// The Redis Functions library: lua/lib.lua once, then each script as one
// function. A script body reads the globals KEYS and ARGV; in the library
// they are two locals of the library that each function sets first (a
// function runs alone on the server, like a script). The library's name
// carries a hash of its code, so stores of different versions sharing a
// server load libraries of different names and never replace each other's.
var libName, libCode = buildLibrary()

func buildLibrary() (string, string) {
	const placeholder = "leasehold_LIBRARY"
	var body strings.Builder
	body.WriteString("local KEYS, ARGV\n")
	for _, b := range libBlocks {
		body.WriteString(b.text)
	}
	for _, sc := range allScripts {
		fmt.Fprintf(&body, "\nredis.register_function('%s_%s', function(keys, args)\n  KEYS, ARGV = keys, args\n%s\nend)\n",
			placeholder, strings.TrimSuffix(sc.name, ".lua"), sc.body)
	}
	sum := sha1.Sum([]byte(body.String()))
	name := "leasehold_" + hex.EncodeToString(sum[:6])
	for _, sc := range allScripts {
		sc.fn = name + "_" + strings.TrimSuffix(sc.name, ".lua")
	}
	return name, "#!lua name=" + name + "\n" + strings.ReplaceAll(body.String(), placeholder, name)
}

// libBlock is one top-level definition of lua/lib.lua (a local function or
// local constants, without comment lines) and the names it defines.
type libBlock struct {
	names []string
	text  string
}

var libBlocks = func() []libBlock {
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		panic(err)
	}
	return splitLib(string(lib))
}()

// splitLib cuts lib.lua into its top-level definitions: each starts at a line
// that begins with "local " (the header comment before the first is dropped).
func splitLib(lib string) []libBlock {
	var blocks []libBlock
	for _, part := range strings.SplitAfter(lib, "\n") {
		if strings.HasPrefix(part, "local ") {
			decl := strings.TrimPrefix(part, "local ")
			var names []string
			if fn, ok := strings.CutPrefix(decl, "function "); ok {
				name, _, _ := strings.Cut(fn, "(")
				names = []string{strings.TrimSpace(name)}
			}
			blocks = append(blocks, libBlock{names: names})
		}
		if len(blocks) > 0 && !commentRE.MatchString(part) {
			blocks[len(blocks)-1].text += part
		}
	}
	for i, b := range blocks {
		if b.names == nil { // local a, b, c = ...: the names before '='
			decl, _, _ := strings.Cut(strings.TrimPrefix(b.text, "local "), "=")
			for _, n := range strings.Split(decl, ",") {
				blocks[i].names = append(blocks[i].names, strings.TrimSpace(n))
			}
		}
	}
	return blocks
}

// identRE matches Lua identifiers.
var identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// commentRE matches a Lua comment line (the library and the scripts have
// no comment after code on a line).
var commentRE = regexp.MustCompile(`(?m)^[ \t]*--.*\n`)

// code returns Lua source without its comment lines.
func code(src string) string { return commentRE.ReplaceAllString(src, "") }

// link returns body preceded by the library blocks it uses, directly or
// through other blocks, in library order. A script's chunk runs on every
// call, and each local function it defines is a closure made anew each
// time; leaving out the ones a script does not use keeps that cost down.
func link(lib []libBlock, body string) string {
	used := map[string]bool{}
	for _, id := range identRE.FindAllString(code(body), -1) {
		used[id] = true
	}
	include := make([]bool, len(lib))
	for changed := true; changed; {
		changed = false
		for i := len(lib) - 1; i >= 0; i-- {
			if include[i] || !slices.ContainsFunc(lib[i].names, func(n string) bool { return used[n] }) {
				continue
			}
			include[i], changed = true, true
			for _, id := range identRE.FindAllString(lib[i].text, -1) {
				used[id] = true
			}
		}
	}
	var out strings.Builder
	for i, b := range lib {
		if include[i] {
			out.WriteString(b.text)
		}
	}
	out.WriteString("\n")
	out.WriteString(body)
	return out.String()
}

// The scripts, one per operation.
var (
	enqueueScript        = loadScript("enqueue.lua", model.OpEnqueue, memoWrite)
	promoteScript        = loadScript("promote.lua", model.OpPromote, memoWrite)
	popScript            = loadScript("pop.lua", model.OpPop, memoWrite)
	extendScript         = loadScript("extend.lua", model.OpExtend, memoWrite)
	ackScript            = loadScript("ack.lua", model.OpAck, memoWrite)
	failScript           = loadScript("fail.lua", model.OpFail, memoWrite)
	retryScript          = loadScript("retry.lua", model.OpRetry, memoWrite)
	claimExpiredScript   = loadScript("claim_expired.lua", model.OpClaimExpired, memoWrite)
	requeueScript        = loadScript("requeue.lua", model.OpRequeue, memoWrite)
	finalizeScript       = loadScript("finalize.lua", model.OpFinalize, memoWrite)
	recoverExpiredScript = loadScript("recover_expired.lua", model.OpRecoverExpired, memoWrite)
	inspectRequeueScript = loadScript("inspect_requeue.lua", model.OpInspectRequeue, memoWrite)
	removeScript         = loadScript("remove.lua", model.OpRemove, memoWrite)
	pruneScript          = loadScript("prune.lua", model.OpPrune, memoWrite)
	enqueueBatchScript   = loadScript("enqueue_batch.lua", model.OpEnqueueBatch, memoWrite)
	ackBatchScript       = loadScript("ack_batch.lua", model.OpAckBatch, memoWrite)
	ackPopScript         = loadScript("ack_pop.lua", model.OpAckBatch, memoWrite)
	getScript            = loadScript("get.lua", model.OpGet, read)
	listScript           = loadScript("list.lua", model.OpList, read)
	countsScript         = loadScript("counts.lua", model.OpCounts, read)
	pauseScript          = loadScript("pause.lua", model.OpPause, idempotentWrite)
	cancelScript         = loadScript("cancel.lua", model.OpCancel, memoWrite)

	allScripts = []*script{enqueueScript, promoteScript, popScript, extendScript,
		ackScript, failScript, retryScript, claimExpiredScript, requeueScript,
		finalizeScript, recoverExpiredScript, inspectRequeueScript, removeScript,
		pruneScript, enqueueBatchScript, ackBatchScript, ackPopScript, getScript, listScript, countsScript,
		pauseScript, cancelScript}
)

// The return codes of the scripts (lua/lib.lua).
const (
	codeOK              = 0
	codeInvalidArgument = 1
	codeStaleClaim      = 2
	codeNotFound        = 3
	codeTransition      = 4
	codeExists          = 5
	codeVersionConflict = 6
	codeQueueFull       = 7
	codeCorrupt         = 8
	codeExhausted       = 9
	codeDuplicate       = 10
)

// reply is a successful script reply: the string after the code (now, or
// List's cursor) and the rest.
type reply struct {
	head string
	rest []string
}

// eval runs sc in one round trip (EVALSHA, or EVAL when the server does not
// have the script yet) and maps a refusal to its error. id names the task
// for error messages. A write gets a new request ID as its last ARGV (and
// its memo key as its last KEYS): a client that sends the command again
// after a dropped connection sends the same ID, and the script answers it
// with the first run's answer instead of running it twice.
func (s *Store) eval(ctx context.Context, sc *script, keys []string, id string, args ...any) (reply, error) {
	code, rest, err := s.call(ctx, sc, keys, args...)
	if err != nil {
		return reply{}, err
	}
	if code != codeOK {
		return reply{}, codeError(sc, code, id, rest)
	}
	if len(rest) < 1 {
		return reply{}, fmt.Errorf("leasehold/redis: %v: short reply from %s", sc.op, sc.name)
	}
	return reply{head: rest[0], rest: rest[1:]}, nil
}

// call runs sc as eval does and returns its reply as it came: the code and
// the strings after it. An error is the transport's or a reply that does
// not parse, never a refusal.
func (s *Store) call(ctx context.Context, sc *script, keys []string, args ...any) (int64, []string, error) {
	req := ""
	if sc.writes {
		req = s.requestID(ctx)
		if sc.memo {
			keys = append(keys, strings.TrimSuffix(keys[0], "seq")+"req:"+req)
		}
	}
	args = append(args, req)
	raw, err := s.runAcked(ctx, sc, keys, args).Slice()
	if err != nil {
		s.reloadClusterState(ctx, err)
		return 0, nil, fmt.Errorf("leasehold/redis: %v: %w", sc.op, permission(err))
	}
	if len(raw) < 1 {
		return 0, nil, fmt.Errorf("leasehold/redis: %v: empty reply from %s", sc.op, sc.name)
	}
	code, ok := raw[0].(int64)
	if !ok {
		return 0, nil, fmt.Errorf("leasehold/redis: %v: reply from %s starts with %T, not a code", sc.op, sc.name, raw[0])
	}
	rest := make([]string, len(raw)-1)
	for i, v := range raw[1:] {
		str, ok := v.(string)
		if !ok {
			return 0, nil, fmt.Errorf("leasehold/redis: %v: element %d of the reply from %s is %T, not a string", sc.op, i+1, sc.name, v)
		}
		rest[i] = str
	}
	return code, rest, nil
}

// run sends sc: FCALL of its function in the library, loading the library
// first when the server lacks it; EVALSHA (EVAL when the server lacks the
// script) from the first time Functions turn out to be unavailable (a
// server older than 7.0, or a user the ACL denies FUNCTION or FCALL).
func (s *Store) run(ctx context.Context, sc *script, keys []string, args []any) *goredis.Cmd {
	if !s.noFunctions.Load() {
		cmd := s.rdb.FCall(ctx, sc.fn, keys, args...)
		err := cmd.Err()
		switch {
		case err == nil || !isRedisError(err):
			return cmd
		case strings.Contains(err.Error(), "Function not found"):
			if lerr := s.loadLibrary(ctx); lerr == nil {
				return s.rdb.FCall(ctx, sc.fn, keys, args...)
			} else if !functionsUnavailable(lerr) {
				if isRedisError(lerr) && permissionMessage(lerr.Error()) {
					cmd.SetErr(lerr) // the refusal to load says why, not "Function not found"
				}
				return cmd
			}
		case !functionsUnavailable(err):
			return cmd
		}
		s.noFunctions.Store(true)
	}
	return sc.Run(ctx, s.rdb, keys, args...)
}

// isRedisError reports whether err is an error reply of the server (the
// command was refused, not lost).
func isRedisError(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// functionsUnavailable reports whether err says the server cannot run or
// load functions for this client: an unknown command (before Redis 7.0) or
// an ACL refusal.
func functionsUnavailable(err error) bool {
	if !isRedisError(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "NOPERM") ||
		strings.Contains(msg, "NOPERM")
}

// reloadClusterState asks a Cluster client to reload its map of slots to
// nodes after a call failed in transport (not refused by a server): the
// master it reached may be gone, its replica serving its slots, and
// go-redis would otherwise keep sending that slot's calls to the dead
// address until its periodic reload (a minute by default). The reload runs
// in the background; the caller's next call routes by the new map.
func (s *Store) reloadClusterState(ctx context.Context, err error) {
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok && !isRedisError(err) && ctx.Err() == nil {
		cc.ReloadState(ctx)
	}
}

// loadLibrary loads the library (FUNCTION LOAD REPLACE), on a Cluster
// client into every master.
func (s *Store) loadLibrary(ctx context.Context) error {
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.FunctionLoadReplace(ctx, libCode).Err()
		})
	}
	return s.rdb.FunctionLoadReplace(ctx, libCode).Err()
}

// codeError is the one place where a script's refusal becomes an error.
func codeError(sc *script, code int64, id string, detail []string) error {
	arg := func(i int) string {
		if i < len(detail) {
			return detail[i]
		}
		return ""
	}
	switch code {
	case codeInvalidArgument:
		return fmt.Errorf("%w: %s", core.ErrInvalidArgument, arg(0))
	case codeStaleClaim:
		switch arg(0) {
		case "missing":
			return fmt.Errorf("%w: task %q no longer exists", core.ErrStaleClaim, id)
		case "version":
			return fmt.Errorf("%w: task %q changed since the broker's claim", core.ErrStaleClaim, id)
		case "cancelled":
			return fmt.Errorf("%w: %w: task %q was cancelled by an operator", core.ErrCancelled, core.ErrStaleClaim, id)
		default:
			return fmt.Errorf("%w: the token no longer holds task %q", core.ErrStaleClaim, id)
		}
	case codeNotFound:
		return fmt.Errorf("%w: %q", core.ErrNotFound, id)
	case codeTransition:
		st, err := model.ParseState(arg(0))
		if err != nil {
			return fmt.Errorf("%w: task %q: state %q", core.ErrCorrupt, id, arg(0))
		}
		return &model.TransitionError{Op: sc.op, State: st}
	case codeExists:
		return fmt.Errorf("%w: task %q already exists", core.ErrConflict, id)
	case codeDuplicate:
		return &model.DuplicateError{Key: arg(1), TaskID: arg(0)}
	case codeVersionConflict:
		return fmt.Errorf("%w: task %q is at version %s", core.ErrConflict, id, arg(0))
	case codeQueueFull:
		return fmt.Errorf("%w: %s pending tasks", core.ErrQueueFull, arg(0))
	case codeCorrupt:
		if permissionMessage(arg(1)) {
			return fmt.Errorf("%w: %s: %s", core.ErrPermission, arg(0), arg(1))
		}
		return fmt.Errorf("%w: %s: %s", core.ErrCorrupt, arg(0), arg(1))
	case codeExhausted:
		return fmt.Errorf("%w at %s", ErrSequenceExhausted, arg(0))
	default:
		return fmt.Errorf("leasehold/redis: %v: internal error: %s returned unknown code %d %q", sc.op, sc.name, code, detail)
	}
}

// --- encoding ----------------------------------------------------------------

// taskFields is the number of strings a task takes in a reply: its ID, then
// its packed value.
const taskFields = 2

// storedFields is the number of values of a packed task (lua/lib.lua);
// records written before the attempt timeout have oldStoredFields and read
// as timeout 0; a task with a unique key has uniqueStoredFields.
const (
	storedFields       = 15
	oldStoredFields    = 14
	uniqueStoredFields = 17
)

// maxSafe is the largest integer a double holds exactly: stored times (µs)
// stay within ±maxSafe so that Lua compares and scores them exactly.
const maxSafe = 1<<53 - 1

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{core.ErrCorrupt}, args...)...)
}

// decodeTasks decodes consecutive tasks of a reply.
func decodeTasks(queue string, f []string) ([]core.Task, error) {
	if len(f)%taskFields != 0 {
		return nil, fmt.Errorf("leasehold/redis: reply of %d fields is not a list of tasks", len(f))
	}
	out := make([]core.Task, 0, len(f)/taskFields)
	for i := 0; i < len(f); i += taskFields {
		t, err := decodeTask(queue, f[i:i+taskFields])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// unpackValues decodes a packed task (lua/lib.lua): MessagePack values one
// after the other, or, as earlier versions of the store wrote them, one
// MessagePack array of them. The values are strings, integers, doubles or
// booleans (what cmsgpack packs for Lua strings, numbers and booleans):
// string, int64, float64 or bool each.
func unpackValues(b string) ([]any, bool) {
	pos := 0
	uint := func(n int) (uint64, bool) {
		if n > len(b)-pos {
			return 0, false
		}
		var v uint64
		for _, c := range []byte(b[pos : pos+n]) {
			v = v<<8 | uint64(c)
		}
		pos += n
		return v, true
	}
	// value decodes the value at pos.
	value := func() (any, bool) {
		if pos >= len(b) {
			return nil, false
		}
		c := b[pos]
		pos++
		var l uint64
		ok := true
		switch {
		case c <= 0x7f:
			return int64(c), true
		case c >= 0xe0:
			return int64(int8(c)), true
		case c == 0xc2 || c == 0xc3:
			return c == 0xc3, true
		case c >= 0xcc && c <= 0xcf: // uint 8..64
			v, ok := uint(1 << (c - 0xcc))
			if !ok || v > 1<<63-1 {
				return nil, false
			}
			return int64(v), true
		case c >= 0xd0 && c <= 0xd3: // int 8..64
			size := 1 << (c - 0xd0)
			v, ok := uint(size)
			if !ok {
				return nil, false
			}
			shift := 64 - 8*size
			return int64(v<<shift) >> shift, true
		case c == 0xca:
			v, ok := uint(4)
			if !ok {
				return nil, false
			}
			return float64(math.Float32frombits(uint32(v))), true
		case c == 0xcb:
			v, ok := uint(8)
			if !ok {
				return nil, false
			}
			return math.Float64frombits(v), true
		case c&0xe0 == 0xa0:
			l = uint64(c & 0x1f)
		case c == 0xd9:
			l, ok = uint(1)
		case c == 0xda:
			l, ok = uint(2)
		case c == 0xdb:
			l, ok = uint(4)
		default:
			return nil, false
		}
		if !ok || l > uint64(len(b)-pos) {
			return nil, false
		}
		v := b[pos : pos+int(l)]
		pos += int(l)
		return v, true
	}
	if len(b) == 0 {
		return nil, false
	}
	var n uint64
	ok := true
	switch c := b[0]; {
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
		pos = 1
	case c == 0xdc:
		pos = 1
		n, ok = uint(2)
	case c == 0xdd:
		pos = 1
		n, ok = uint(4)
	default: // the values one after the other
		var out []any
		for pos < len(b) {
			v, ok := value()
			if !ok {
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	}
	if !ok || n > uint64(len(b)) {
		return nil, false
	}
	out := make([]any, n)
	for i := range out {
		if out[i], ok = value(); !ok {
			return nil, false
		}
	}
	return out, pos == len(b)
}

// decodeTask decodes one task of a reply: its ID and its packed value.
// Every field is checked again here, so a reply that does not parse is
// ErrCorrupt, never a panic.
func decodeTask(queue string, r []string) (core.Task, error) {
	if len(r) != taskFields {
		return core.Task{}, fmt.Errorf("leasehold/redis: task of %d fields", len(r))
	}
	t := core.Task{Queue: queue, ID: r[0]}
	f, ok := unpackValues(r[1])
	if ok && len(f) == 3 && f[0] == "quarantined" {
		// A record set aside (lua/lib.lua, set_aside): only its ID and
		// the reason are kept.
		reason, ok := f[1].(string)
		if !ok || reason == "" {
			return core.Task{}, corrupt("task %q: quarantine record does not parse", t.ID)
		}
		t.State, t.Quarantine = model.Quarantined, reason
		return t, nil
	}
	if !ok || (len(f) != storedFields && len(f) != oldStoredFields && len(f) != uniqueStoredFields) {
		return core.Task{}, corrupt("task %q: packed value does not parse", t.ID)
	}
	var err error
	str := func(i int, name string) string {
		s, ok := f[i].(string)
		if !ok && err == nil {
			err = corrupt("task %q: field %s = %v", t.ID, name, f[i])
		}
		return s
	}
	field := func(i int, name string, lo, hi int64) int64 {
		n, ok := f[i].(int64)
		if (!ok || n < lo || n > hi) && err == nil {
			err = corrupt("task %q: field %s = %v", t.ID, name, f[i])
		}
		return n
	}
	tm := func(i int, name string) time.Time {
		if f[i] == false {
			return time.Time{}
		}
		return time.UnixMicro(field(i, name, -maxSafe, maxSafe)).UTC()
	}
	if p := str(0, "payload"); p != "" {
		t.Payload = []byte(p)
	}
	t.Priority = int(field(1, "priority", model.MinPriority, model.MaxPriority))
	if st, e := model.ParseState(str(2, "state")); e == nil {
		t.State = st
	} else if err == nil {
		err = corrupt("task %q: field state = %v", t.ID, f[2])
	}
	t.Attempt = int(field(3, "attempt", 0, maxSafe))
	t.MaxAttempts = int(field(4, "max_attempts", 1, maxSafe))
	t.Version = uint64(field(5, "version", 1, versionLimit-1))
	t.ClaimToken = uint64(field(6, "token", 0, versionLimit-1))
	t.EnqueuedAt = time.UnixMicro(field(7, "enqueued_at", -maxSafe, maxSafe)).UTC()
	t.RunAfter = tm(8, "run_after")
	t.ClaimedAt = tm(9, "claimed_at")
	t.Deadline = tm(10, "deadline")
	t.FinishedAt = tm(11, "finished_at")
	if errs := str(12, "errors"); err == nil {
		t.Errors, err = decodeErrors(t.ID, errs)
	}
	if res := str(13, "result"); res != "" {
		t.Result = []byte(res)
	}
	if len(f) >= storedFields {
		if d, ok := parseTimeout(str(14, "timeout")); ok {
			t.Timeout = d
		} else if err == nil {
			err = corrupt("task %q: field timeout = %v", t.ID, f[14])
		}
	}
	if len(f) == uniqueStoredFields {
		t.UniqueKey = str(15, "unique_key")
		t.UniqueUntil = tm(16, "unique_until")
		if t.UniqueKey == "" && err == nil {
			err = corrupt("task %q: field unique_key is empty", t.ID)
		}
	}
	if err != nil {
		return core.Task{}, err
	}
	return t, nil
}

// enqueueArgs are the arguments an enqueue script takes for one task whose
// arguments were checked (runAfter: validEnqueue's): ID, payload, priority,
// run-after time, attempts, attempt timeout, unique key and its period (µs,
// ” while pending).
func enqueueArgs(a model.EnqueueArgs, runAfter string) []any {
	period := ""
	if a.UniqueFor > 0 {
		period = strconv.FormatInt(int64(a.UniqueFor/time.Microsecond), 10)
	}
	return []any{a.ID, a.Payload, a.Priority, runAfter, a.MaxAttempts, timeoutArg(a.Timeout), a.UniqueKey, period}
}

// timeoutArg is the attempt timeout as scripts take and store it: the
// empty string for none, else decimal nanoseconds.
func timeoutArg(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatInt(int64(d), 10)
}

// parseTimeout reads a stored attempt timeout (timeoutArg's form).
func parseTimeout(s string) (time.Duration, bool) {
	if s == "" {
		return 0, true
	}
	if s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > int64(model.MaxDuration) {
		return 0, false
	}
	return time.Duration(n), true
}

// decodeErrors parses the error history: entries
// "<attempt> <at> <flag> <length>:<message>" back to back, flag 0 for a
// handler's failure, 1 for a lease expiry, 2 for an operator's Cancel.
func decodeErrors(id, s string) ([]core.TaskError, error) {
	var out []core.TaskError
	rest := s
	for rest != "" {
		head, tail, ok := strings.Cut(rest, ":")
		parts := strings.Split(head, " ")
		if !ok || len(parts) != 4 {
			return nil, corrupt("task %q: error history does not parse", id)
		}
		attempt, e1 := strconv.ParseInt(parts[0], 10, 64)
		at, e2 := strconv.ParseInt(parts[1], 10, 64)
		n, e3 := strconv.Atoi(parts[3])
		if e1 != nil || e2 != nil || e3 != nil || attempt < 0 || at < -maxSafe || at > maxSafe ||
			(parts[2] != "0" && parts[2] != "1" && parts[2] != "2") || n < 0 || n > len(tail) {
			return nil, corrupt("task %q: error history does not parse", id)
		}
		out = append(out, core.TaskError{
			Attempt:      int(attempt),
			At:           time.UnixMicro(at).UTC(),
			Message:      tail[:n],
			LeaseExpired: parts[2] == "1",
			Cancelled:    parts[2] == "2",
		})
		rest = tail[n:]
	}
	return out, nil
}

// micros encodes a time argument: "" for the zero time, else µs since the
// epoch (rounded by model.Round), which must lie within ±maxSafe.
func micros(what string, t time.Time) (string, error) {
	if t.IsZero() {
		return "", nil
	}
	us := model.Round(t).UnixMicro()
	if us < -maxSafe || us > maxSafe {
		return "", fmt.Errorf("%w: %s %v outside the store's time range", core.ErrInvalidArgument, what, t)
	}
	return strconv.FormatInt(us, 10), nil
}

// boundMicros encodes a bound (Prune's before) rounded by model.Round
// (truncated to the µs) and clamped to ±maxSafe, which keeps "stored time <
// bound" exact.
func boundMicros(t time.Time) string {
	return strconv.FormatInt(min(max(model.Round(t).UnixMicro(), -maxSafe), maxSafe), 10)
}

// duration encodes a lease, TTL or delay in µs (truncated). The callers
// check it against the model's rules first (at most model.MaxDuration);
// this is the last guard of the exact range.
func duration(what string, d time.Duration) (string, error) {
	if d > model.MaxDuration {
		return "", fmt.Errorf("%w: %s %v longer than %v", core.ErrInvalidArgument, what, d, model.MaxDuration)
	}
	return strconv.FormatInt(int64(d/time.Microsecond), 10), nil
}

// parseNow decodes the now a script reports.
func parseNow(s string) (time.Time, error) {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("leasehold/redis: script reported now %q", s)
	}
	return time.UnixMicro(us).UTC(), nil
}
