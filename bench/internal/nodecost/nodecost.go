// Package nodecost reads what the lock nodes spent between two moments of a benchmark: their
// commands and their process CPU from the servers' own counters (INFO), and, for servers run
// under valgrind's callgrind, the instructions they executed. cmd/pair and cmd/burst share it.
package nodecost

import (
	"bufio"
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Command is one command's calls and time (INFO commandstats), summed over the nodes.
type Command struct {
	Calls int64
	Usec  int64
}

// Stats are the servers' counters, summed over the nodes.
type Stats struct {
	Commands map[string]Command // INFO commandstats, by command
	CPUus    float64            // used_cpu_user + used_cpu_sys, µs
}

// Since returns the counters' growth from before to s.
func (s Stats) Since(before Stats) Stats {
	d := Stats{Commands: map[string]Command{}, CPUus: s.CPUus - before.CPUus}
	for cmd, a := range s.Commands {
		b := before.Commands[cmd]
		if c := (Command{Calls: a.Calls - b.Calls, Usec: a.Usec - b.Usec}); c.Calls != 0 {
			d.Commands[cmd] = c
		}
	}
	return d
}

// Read reads the counters of the nodes behind rcs. The INFO command itself is not in
// commandstats until it returns, so one reading before and one after count none of theirs.
func Read(ctx context.Context, rcs []*redis.Client) (Stats, error) {
	s := Stats{Commands: map[string]Command{}}
	for _, rc := range rcs {
		info, err := rc.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return s, err
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			name, val, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch {
			case name == "used_cpu_user" || name == "used_cpu_sys":
				f, _ := strconv.ParseFloat(val, 64)
				s.CPUus += f * 1e6
			case strings.HasPrefix(name, "cmdstat_"):
				var c Command
				for _, kv := range strings.Split(val, ",") {
					k, v, _ := strings.Cut(kv, "=")
					switch k {
					case "calls":
						c.Calls, _ = strconv.ParseInt(v, 10, 64)
					case "usec":
						c.Usec, _ = strconv.ParseInt(v, 10, 64)
					}
				}
				cmd := strings.TrimPrefix(name, "cmdstat_")
				old := s.Commands[cmd]
				s.Commands[cmd] = Command{old.Calls + c.Calls, old.Usec + c.Usec}
			}
		}
	}
	return s, nil
}
