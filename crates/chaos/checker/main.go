// Command chaos-checker judges the register histories that `latsdb chaos`
// records, with Porcupine (github.com/anishathalye/porcupine), a
// linearizability checker written outside this project.
//
// Input: a JSON-lines file, one operation per line:
//
//	{"worker":3,"key":5,"era":0,"kind":"write","from":0,"value":77,"read":0,"ok":true,"unknown":false,"call":12,"ret":40}
//
// kind is "read" (a committed read: no lock, any replica), "lread" (a read
// under an exclusive lock, at the primary), "write" (a blind write), or
// "cas" (compare-and-set: a locking read, then a write when the value read
// equals from). For reads, value is the value read; for a compare-and-set,
// value is the one it writes and read the one it read. unknown marks a write
// or cas whose outcome the client never learnt (it may or may not have
// taken effect); such an operation is given no return time.
//
// What is checked, per key and per era (an era ends at a restart of the
// whole cluster, where commits not yet durable may be lost as documented):
//   - writes, compare-and-sets and locking reads together are linearizable;
//   - every committed read, on its own with those operations, is
//     linearizable (the register is regular for committed reads: each
//     returns a value that was current at some instant of the read, but two
//     reads need not agree on the order of a write they both overlap).
//
// Whether all reads together are linearizable is reported, not judged.
//
// Exit status: 0 when both checks pass, 1 when one fails (the operations of
// the failing check are written next to the input as an HTML
// visualization), 2 when the input cannot be read or a check timed out.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

type record struct {
	Worker  int    `json:"worker"`
	Key     int64  `json:"key"`
	Era     int    `json:"era"`
	Kind    string `json:"kind"`
	From    int64  `json:"from"`
	Value   int64  `json:"value"`
	Read    int64  `json:"read"`
	Ok      bool   `json:"ok"`
	Unknown bool   `json:"unknown"`
	Call    int64  `json:"call"`
	Ret     int64  `json:"ret"`
}

type input struct {
	Kind    string
	From    int64
	Value   int64
	Unknown bool
}

type output struct {
	Value int64
	Ok    bool
}

// state is a register's value; known is false at the start of an era after
// the first, when the value that came back from the restart is not known
// until an operation observes it.
type state struct {
	known bool
	value int64
}

// step is the register's sequential specification. A state not known (the
// start of an era after a restart of the whole cluster) may turn out to be
// only 0 or a value some write of an earlier era wrote (allowed).
func step(allowed map[int64]bool) func(interface{}, interface{}, interface{}) (bool, interface{}) {
	return func(s0 interface{}, in0 interface{}, out0 interface{}) (bool, interface{}) {
		s, in, out := s0.(state), in0.(input), out0.(output)
		switch in.Kind {
		case "read", "lread":
			if !s.known {
				return allowed[out.Value], state{true, out.Value}
			}
			return out.Value == s.value, s
		case "write":
			return true, state{true, in.Value}
		case "cas":
			return casStep(allowed, s, in, out)
		}
		return false, s
	}
}

func casStep(allowed map[int64]bool, s state, in input, out output) (bool, interface{}) {
	if in.Unknown {
		// Applied if it matched; an aborted one is linearized last,
		// where nothing observes it.
		if !s.known || s.value == in.From {
			return true, state{true, in.Value}
		}
		return true, s
	}
	// A compare-and-set read out.Value under its lock, then wrote in.Value
	// when that was in.From.
	if out.Ok != (out.Value == in.From) {
		return false, s
	}
	if s.known && out.Value != s.value {
		return false, s
	}
	if !s.known && !allowed[out.Value] {
		return false, s
	}
	if out.Ok {
		return true, state{true, in.Value}
	}
	return true, state{true, out.Value}
}

func model(era int, allowed map[int64]bool) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return state{known: era == 0, value: 0} },
		Step: step(allowed),
		DescribeOperation: func(in0 interface{}, out0 interface{}) string {
			in, out := in0.(input), out0.(output)
			suffix := ""
			if in.Unknown {
				suffix = " (outcome unknown)"
			}
			switch in.Kind {
			case "read", "lread":
				return fmt.Sprintf("%s() -> %d", in.Kind, out.Value)
			case "write":
				return fmt.Sprintf("write(%d)%s", in.Value, suffix)
			default:
				return fmt.Sprintf("cas(%d, %d) read %d -> %v%s", in.From, in.Value, out.Value, out.Ok, suffix)
			}
		},
		DescribeState: func(s0 interface{}) string {
			s := s0.(state)
			if !s.known {
				return "?"
			}
			return fmt.Sprint(s.value)
		},
	}
}

type group struct {
	key int64
	era int
	// allowed is 0 and every value a write of an earlier era of this key
	// wrote: what a restart of the whole cluster may have left.
	allowed map[int64]bool
	base    []porcupine.Operation
	// reads are the committed reads, in call order.
	reads []porcupine.Operation
}

func load(path string) (map[[2]int64]*group, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	groups := map[[2]int64]*group{}
	// Per key, (era, value) of every write and compare-and-set.
	written := map[int64][][2]int64{}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	count := 0
	for line := 1; scanner.Scan(); line++ {
		var r record
		if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
			return nil, 0, fmt.Errorf("%s line %d: %v", path, line, err)
		}
		ret := r.Ret
		if r.Unknown {
			if r.Kind != "write" && r.Kind != "cas" {
				return nil, 0, fmt.Errorf("%s line %d: only writes may have an unknown outcome", path, line)
			}
			ret = math.MaxInt64
		}
		seen := r.Value
		if r.Kind == "cas" {
			seen = r.Read
		}
		op := porcupine.Operation{
			ClientId: r.Worker,
			Input:    input{Kind: r.Kind, From: r.From, Value: r.Value, Unknown: r.Unknown},
			Call:     r.Call,
			Output:   output{Value: seen, Ok: r.Ok},
			Return:   ret,
		}
		if r.Kind == "write" || r.Kind == "cas" {
			written[r.Key] = append(written[r.Key], [2]int64{int64(r.Era), r.Value})
		}
		k := [2]int64{r.Key, int64(r.Era)}
		g := groups[k]
		if g == nil {
			g = &group{key: r.Key, era: r.Era}
			groups[k] = g
		}
		if r.Kind == "read" {
			g.reads = append(g.reads, op)
		} else {
			g.base = append(g.base, op)
		}
		count++
	}
	for _, g := range groups {
		g.allowed = map[int64]bool{0: true}
		for _, w := range written[g.key] {
			if w[0] < int64(g.era) {
				g.allowed[w[1]] = true
			}
		}
	}
	return groups, count, scanner.Err()
}

// closure is the operations of base (sorted by call) that a read
// returning at t may depend on: those called no later than t, and, again
// and again, those called before any of them returned (a locking read
// called before t may return a value written after t). Every operation
// left out is called after every one kept has returned, so it comes after
// them in any linearization and cannot change what they may return.
// maxReturn[i] is the latest known return time among base[:i].
func closure(base []porcupine.Operation, maxReturn []int64, t int64) []porcupine.Operation {
	for {
		i := sort.Search(len(base), func(i int) bool { return base[i].Call > t })
		if maxReturn[i] <= t {
			return base[:i]
		}
		t = maxReturn[i]
	}
}

// latestReturns gives, for each i, the latest return time among base[:i],
// not counting operations whose outcome is unknown (they never returned).
func latestReturns(base []porcupine.Operation) []int64 {
	out := make([]int64, len(base)+1)
	for i, op := range base {
		out[i+1] = out[i]
		if op.Return != math.MaxInt64 && op.Return > out[i+1] {
			out[i+1] = op.Return
		}
	}
	return out
}

type verdict struct {
	Operations   int     `json:"operations"`
	Groups       int     `json:"groups"`
	Linearizable bool    `json:"linearizable"`
	Regular      bool    `json:"regular"`
	Atomic       bool    `json:"atomic_reads"`
	TimedOut     bool    `json:"timed_out"`
	Reads        int     `json:"committed_reads"`
	ReadsChecked int     `json:"committed_reads_checked"`
	Failure      string  `json:"failure,omitempty"`
	Seconds      float64 `json:"seconds"`
}

func main() {
	timeout := flag.Duration("timeout", 30*time.Second, "longest time for one check")
	budget := flag.Duration("budget", 5*time.Minute, "longest time for the whole history; reads left unchecked then are reported")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: chaos-checker [--timeout D] HISTORY.jsonl")
		os.Exit(2)
	}
	v, err := judge(flag.Arg(0), *timeout, time.Now().Add(*budget))
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: cannot read the history: %v\n", err)
		os.Exit(2)
	}
	encoded, _ := json.Marshal(v)
	fmt.Println(string(encoded))
	switch {
	case !v.Linearizable || !v.Regular:
		os.Exit(1)
	case v.TimedOut:
		os.Exit(2)
	}
}

// judge checks the history in path; a failing check is drawn next to it
// as violation.html.
func judge(path string, timeout time.Duration, deadline time.Time) (verdict, error) {
	started := time.Now()
	groups, count, err := load(path)
	if err != nil {
		return verdict{}, err
	}
	v := verdict{Operations: count, Groups: len(groups), Linearizable: true, Regular: true, Atomic: true}
	keys := make([][2]int64, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][1] < keys[j][1] || (keys[i][1] == keys[j][1] && keys[i][0] < keys[j][0])
	})
	fail := func(what string, m porcupine.Model, info porcupine.LinearizationInfo) {
		if v.Failure == "" {
			v.Failure = what
			out := filepath.Join(filepath.Dir(path), "violation.html")
			if err := porcupine.VisualizePath(m, info, out); err == nil {
				v.Failure += " (see " + out + ")"
			}
		}
	}
	for _, k := range keys {
		v.Reads += len(groups[k].reads)
		judgeGroup(groups[k], timeout, deadline, &v, fail)
	}
	v.Seconds = time.Since(started).Seconds()
	return v, nil
}

func judgeGroup(g *group, timeout time.Duration, deadline time.Time, v *verdict, fail func(string, porcupine.Model, porcupine.LinearizationInfo)) {
	m := model(g.era, g.allowed)
	sort.Slice(g.base, func(i, j int) bool { return g.base[i].Call < g.base[j].Call })
	res, info := porcupine.CheckOperationsVerbose(m, g.base, timeout)
	if res == porcupine.Unknown {
		v.TimedOut = true
	} else if res == porcupine.Illegal {
		v.Linearizable = false
		fail(fmt.Sprintf("key %d, era %d: writes, compare-and-sets and locking reads are not linearizable", g.key, g.era), m, info)
		return
	}
	maxReturn := latestReturns(g.base)
	for _, r := range g.reads {
		if time.Now().After(deadline) {
			v.TimedOut = true
			return
		}
		v.ReadsChecked++
		ops := append(append([]porcupine.Operation{}, closure(g.base, maxReturn, r.Return)...), r)
		res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
		if res == porcupine.Unknown {
			v.TimedOut = true
		} else if res == porcupine.Illegal {
			v.Regular = false
			fail(fmt.Sprintf("key %d, era %d: committed read by worker %d returned %d, which no write could have left at any instant of the read",
				g.key, g.era, r.ClientId, r.Output.(output).Value), m, info)
			break
		}
	}
	// Reported, not judged: whether the reads also agree on one order.
	if time.Now().After(deadline) {
		return
	}
	all := append(append([]porcupine.Operation{}, g.base...), g.reads...)
	if res, _ := porcupine.CheckOperationsVerbose(m, all, timeout/4); res == porcupine.Illegal {
		v.Atomic = false
	}
}
