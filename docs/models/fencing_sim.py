"""Randomized check of the fencing-token rule (docs/locking.md, "Fencing tokens").

Extended from shared/models/fencing_sim.py: locks on many distinct keys share one fence counter
per node (redlock's default: one counter per hash tag, and one for every key without a tag),
and up to three acquisitions of distinct keys run at once, each node serving them in its own
order — so the quorum's counters differ even when no node missed anything.

Nodes: counter starts at node TIME in µs when missing, else +1; quorum token = max of the first
Q answers; when the answers differ, write the max back to those Q nodes and to others that
answer in time, except a node in quarantine or without a boot marker. A node that loses its
memory re-creates its boot marker when a new counter first reads it (only a new counter reads
it: a counter that exists was created past the quarantine) and refuses locks for MAX_TTL.
Nodes may be unreachable, answer in random order, restart with amnesia, and have clock offsets.
Checks: every token is greater than every token issued by an acquisition that ended before it
started (so per key, and per counter), and the number of counters left on a node (bounded: one,
whatever the number of keys). It does not check that a lock has one holder: the variant that
writes back to nodes in quarantine keeps tokens in order, but the counter it leaves there would
end that node's quarantine early; redlock's TestWriteBackSkipsANodeInQuarantine checks that.

Run: python3 docs/models/fencing_sim.py"""
import random

def run(seed, N=5, steps=4000, keys=1000, skew_ms=200, max_ttl_ms=10_000, amnesia_p=0.01, down_p=0.2,
        concurrency=3, writeback=True, seed_with_time=True, quarantine=True, writeback_checks_quarantine=True):
    rnd = random.Random(seed)
    Q = N // 2 + 1
    off = [rnd.uniform(-skew_ms, skew_ms) for _ in range(N)]
    counter = [None] * N           # the shared fence counter of each node
    lock = [dict() for _ in range(N)]  # key -> (value, expiry node-time ms)
    boot = [None] * N              # quarantine end, node-time ms
    t = 1_700_000_000_000.0        # real time, ms
    last_token = -1                # highest token of the acquisitions that ended
    val = 0
    def in_quarantine(n, now):
        return quarantine and (boot[n] is None or now < boot[n])
    for step in range(steps):
        t += rnd.choice([0.5, 1, 5, 50, 500, 5000])
        for n in range(N):
            if rnd.random() < amnesia_p:
                counter[n] = None; lock[n] = {}; boot[n] = None
        acqs = []
        for k in rnd.sample(range(keys), rnd.randint(1, concurrency)):
            val += 1
            acqs.append((k, val, rnd.choice([100, 1000, max_ttl_ms])))
        answers = {v: [] for _, v, _ in acqs}
        for n in range(N):
            now = t + off[n]
            for k, v, ttl in rnd.sample(acqs, len(acqs)):   # this node's order
                if rnd.random() < down_p:
                    continue
                held = lock[n].get(k)
                if held is not None and now < held[1]:
                    continue
                if counter[n] is None:
                    # Only a new counter reads the boot marker, creating it on first touch.
                    if quarantine and boot[n] is None:
                        boot[n] = now + max_ttl_ms
                    if in_quarantine(n, now):
                        continue
                    counter[n] = int(now * 1000) if seed_with_time else 1
                else:
                    counter[n] += 1
                lock[n][k] = (v, now + ttl)
                answers[v].append((n, counter[n]))
        won = []
        for k, v, ttl in acqs:
            got = answers[v]
            rnd.shuffle(got)                   # arrival order
            if len(got) < Q:
                for n in range(N):
                    if lock[n].get(k, (None,))[0] == v:
                        del lock[n][k]
                continue
            first = got[:Q]
            token = max(c for _, c in first)
            if writeback and len({c for _, c in first}) > 1:
                # Sent to every node short of the token: the quorum's, and others that answer in
                # time. A node in quarantine or without a boot marker is not written (fence.lua).
                quorum = {n for n, _ in first}
                for n in range(N):
                    if n not in quorum and rnd.random() < down_p + 0.3:
                        continue
                    if writeback_checks_quarantine and in_quarantine(n, t + off[n]):
                        continue
                    counter[n] = max(counter[n] or 0, token)
            if token <= last_token:
                return f"seed {seed} step {step}: token {token} <= {last_token}, issued before it started"
            won.append((k, v, ttl, token))
        if not won:
            continue
        last_token = max(last_token, max(tok for *_, tok in won))
        # hold, then release or abandon (expire)
        longest = max(ttl for _, _, ttl, _ in won)
        t += rnd.uniform(0, min(ttl for _, _, ttl, _ in won) * 0.9)
        abandoned = False
        for k, v, ttl, _ in won:
            if rnd.random() < 0.7:
                for n in range(N):
                    if lock[n].get(k, (None,))[0] == v:
                        del lock[n][k]
            else:
                abandoned = True
        if abandoned:
            t += longest + 2 * skew_ms + 1   # the next acquisitions only after expiry everywhere
    counters = max(1 if c is not None else 0 for c in counter)
    return None if counters <= 1 else f"seed {seed}: {counters} counters on a node"

if __name__ == "__main__":
    variants = {
        "design (shared counter, time-seeded, write-back, quarantine)": {},
        "no write-back": {"writeback": False},
        "counters start at 1": {"seed_with_time": False},
        "no quarantine": {"quarantine": False},
        "write-back to nodes in quarantine": {"writeback_checks_quarantine": False},
    }
    for name, kw in variants.items():
        fails = [r for r in (run(s, **kw) for s in range(300)) if r]
        print(f"{name}: {len(fails)}/300 seeds violate monotonicity" + (f" e.g. {fails[0]}" if fails else ""))
