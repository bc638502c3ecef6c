package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// op is one history line: worker, key, era, kind, from, value, ok,
// unknown, call, return.
// (A compare-and-set's read is its from when it succeeded; casRead
// writes one that failed.)
func op(worker int, key int64, era int, kind string, from, value int64, ok, unknown bool, call, ret int64) string {
	read := from
	return fmt.Sprintf(`{"worker":%d,"key":%d,"era":%d,"kind":%q,"from":%d,"value":%d,"read":%d,"ok":%v,"unknown":%v,"call":%d,"ret":%d}`,
		worker, key, era, kind, from, value, read, ok, unknown, call, ret)
}

func casRead(worker int, key int64, from, value, read int64, call, ret int64) string {
	return fmt.Sprintf(`{"worker":%d,"key":%d,"era":0,"kind":"cas","from":%d,"value":%d,"read":%d,"ok":false,"unknown":false,"call":%d,"ret":%d}`,
		worker, key, from, value, read, call, ret)
}

func judged(t *testing.T, lines ...string) verdict {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := judge(path, 10*time.Second, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAStaleCommittedReadIsNotRegular(t *testing.T) {
	v := judged(t,
		op(1, 1, 0, "write", 0, 5, true, false, 1, 10),
		op(2, 1, 0, "write", 0, 6, true, false, 11, 20),
		op(3, 1, 0, "read", 0, 5, true, false, 21, 22))
	if v.Regular || !v.Linearizable {
		t.Fatalf("a read of 5 after 6 was acknowledged must fail regularity: %+v", v)
	}
}

func TestALostWriteIsNotLinearizable(t *testing.T) {
	v := judged(t,
		op(1, 1, 0, "write", 0, 5, true, false, 1, 10),
		op(2, 1, 0, "lread", 0, 0, true, false, 11, 12))
	if v.Linearizable {
		t.Fatalf("a locking read of the initial value after an acknowledged write must fail: %+v", v)
	}
}

func TestAWrongCompareAndSetIsNotLinearizable(t *testing.T) {
	v := judged(t,
		op(1, 1, 0, "write", 0, 5, true, false, 1, 10),
		op(2, 1, 0, "cas", 0, 7, true, false, 11, 12))
	if v.Linearizable {
		t.Fatalf("a cas from 0 that succeeds when the value is 5 must fail: %+v", v)
	}
}

func TestReadsConcurrentWithAWriteMaySeeEitherValueButOnlyRegularly(t *testing.T) {
	// Two reads during one write: the first sees the new value, the second
	// the old one. Each alone is fine (regular); together they are not
	// atomic.
	v := judged(t,
		op(1, 1, 0, "write", 0, 5, true, false, 1, 100),
		op(2, 1, 0, "read", 0, 5, true, false, 10, 20),
		op(3, 1, 0, "read", 0, 0, true, false, 30, 40))
	if !v.Linearizable || !v.Regular || v.Atomic {
		t.Fatalf("new-then-old reads during a write are regular, not atomic: %+v", v)
	}
}

func TestAWriteOfUnknownOutcomeMayHaveHappenedOrNot(t *testing.T) {
	applied := judged(t,
		op(1, 1, 0, "write", 0, 5, false, true, 1, 10),
		op(2, 1, 0, "lread", 0, 5, true, false, 20, 21))
	lost := judged(t,
		op(1, 1, 0, "write", 0, 5, false, true, 1, 10),
		op(2, 1, 0, "lread", 0, 0, true, false, 20, 21))
	if !applied.Linearizable || !lost.Linearizable {
		t.Fatalf("a write of unknown outcome may or may not apply: %+v %+v", applied, lost)
	}
}

func TestALaterEraStartsFromWhatCameBack(t *testing.T) {
	v := judged(t,
		op(1, 1, 0, "write", 0, 3, true, false, 1, 10),
		op(1, 1, 0, "write", 0, 5, true, false, 11, 12),
		op(2, 1, 1, "lread", 0, 3, true, false, 20, 21),
		op(2, 1, 1, "lread", 0, 3, true, false, 22, 23))
	if !v.Linearizable {
		t.Fatalf("after a full restart a register may hold any value written before: %+v", v)
	}
	v = judged(t,
		op(1, 1, 0, "write", 0, 3, true, false, 1, 10),
		op(1, 1, 0, "write", 0, 4, true, false, 11, 12),
		op(2, 1, 1, "lread", 0, 3, true, false, 20, 21),
		op(2, 1, 1, "lread", 0, 4, true, false, 22, 23))
	if v.Linearizable {
		t.Fatalf("within an era, a value cannot change without a write: %+v", v)
	}
	v = judged(t,
		op(1, 1, 0, "write", 0, 3, true, false, 1, 10),
		op(2, 1, 1, "lread", 0, 9, true, false, 20, 21))
	if v.Linearizable {
		t.Fatalf("after a full restart a register cannot hold a value no one wrote: %+v", v)
	}
}

func TestAFailedCompareAndSetReadsTheCurrentValue(t *testing.T) {
	ok := judged(t,
		op(1, 1, 0, "write", 0, 5, true, false, 1, 10),
		casRead(2, 1, 0, 7, 5, 11, 12))
	stale := judged(t,
		op(1, 1, 0, "write", 0, 5, true, false, 1, 10),
		casRead(2, 1, 4, 7, 0, 11, 12))
	if !ok.Linearizable || stale.Linearizable {
		t.Fatalf("a failed cas that read 5 is fine, one that read the old 0 is not: %+v %+v", ok, stale)
	}
}

func TestAReadIsJudgedWithTheOperationsItMayDependOn(t *testing.T) {
	// A locking read called before the committed read returns, which
	// returns a value written after it: the write must be in the read's
	// check, or the locking read has no writer.
	v := judged(t,
		op(1, 1, 0, "write", 0, 5, true, false, 1, 10),
		op(2, 1, 0, "lread", 0, 9, true, false, 15, 100),
		op(3, 1, 0, "read", 0, 5, true, false, 20, 30),
		op(4, 1, 0, "write", 0, 9, true, false, 50, 60))
	if !v.Linearizable || !v.Regular {
		t.Fatalf("%+v", v)
	}
}

func TestAMalformedHistoryIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, []byte("{\"worker\":\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := judge(path, time.Second, time.Now().Add(time.Minute)); err == nil {
		t.Fatal("a truncated line must be refused")
	}
	unknownRead := op(1, 1, 0, "read", 0, 5, false, true, 1, 2) + "\n"
	if err := os.WriteFile(path, []byte(unknownRead), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := judge(path, time.Second, time.Now().Add(time.Minute)); err == nil {
		t.Fatal("a read of unknown outcome must be refused")
	}
}
