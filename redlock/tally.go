package redlock

import (
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// tally counts the replies of one request to the nodes and decides its outcome.
type tally struct {
	n, quorum                        int
	ok, refused, quarantined, failed int
	revoked                          int // refusals because the lock was revoked (revoke)
	oks                              []reply
	few                              [5]reply // oks' room for up to 5 nodes
	refusedNodes                     []int
	holder                           *Holder // reported by the most refusing nodes
	holders                          []holderVotes
	refusal                          *refusal // the first refuseWhile refusal
	errs                             []*NodeError
	wrongType                        bool // a node found a value of another kind under a key
}

// add counts r and reports whether the outcome is decided.
func (t *tally) add(c *Client, r reply) bool {
	switch r.outcome {
	case outcomeOK:
		t.ok++
		t.oks = append(t.oks, r)
	case outcomeRefused:
		t.refused++
		if r.revoked {
			t.revoked++
		}
		t.refusedNodes = append(t.refusedNodes, r.node)
		t.noteHolder(r.holder)
		if t.refusal == nil {
			t.refusal = r.refusal
		}
	case outcomeQuarantined:
		t.quarantined++
		t.errs = append(t.errs, c.nodeError(r.node, r.err))
	default:
		t.failed++
		err := r.err
		if isWrongType(err) {
			t.wrongType = true
			err = fmt.Errorf("%w (a key holds a value of another kind on this node: use a key of its own)", err)
		}
		t.errs = append(t.errs, c.nodeError(r.node, err))
	}
	return t.ok >= t.quorum || t.lost()
}

// holderVotes counts the refusing nodes that reported one holder.
type holderVotes struct {
	holder *Holder
	votes  int
}

// noteHolder counts h and keeps as t.holder the holder that the most refusing nodes reported:
// when racers split the vote, a node may report a racer that does not win, while the winner
// holds more of the nodes.
func (t *tally) noteHolder(h *Holder) {
	if h == nil {
		return
	}
	i := slices.IndexFunc(t.holders, func(v holderVotes) bool {
		return v.holder.Key == h.Key && v.holder.Label == h.Label && v.holder.Metadata == h.Metadata && v.holder.Done == h.Done
	})
	if i < 0 {
		t.holders = append(t.holders, holderVotes{holder: h})
		i = len(t.holders) - 1
	}
	t.holders[i].votes++
	if t.holder == nil || t.holders[i].votes > t.votesFor(t.holder) {
		t.holder = t.holders[i].holder
	}
}

// votesFor returns how many refusing nodes reported h.
func (t *tally) votesFor(h *Holder) int {
	for _, v := range t.holders {
		if v.holder == h {
			return v.votes
		}
	}
	return 0
}

// takeRefused returns the nodes that refused, and forgets their refusals so that they can be
// asked again.
func (t *tally) takeRefused() []int {
	nodes := t.refusedNodes
	t.refused, t.refusedNodes = 0, nil
	return nodes
}

// lost reports whether a quorum can no longer be reached.
func (t *tally) lost() bool { return t.refused+t.quarantined+t.failed > t.n-t.quorum }

// reason says why a quorum was not reached: refused means held (acquire) or not ours
// (extend, release). A key that holds a value of another kind on a node comes first:
// retrying cannot help.
func (t *tally) reason(refused error) error {
	if t.wrongType {
		return ErrInvalidKey
	}
	if t.refused > t.n-t.quorum {
		return refused
	}
	if t.quarantined+t.failed > t.n-t.quorum {
		return ErrQuorumUnavailable
	}
	// Undecided replies are missing: count what could not answer as unavailable.
	if t.refused > 0 {
		return refused
	}
	return ErrQuorumUnavailable
}

// isWrongType reports whether err is a node's WRONGTYPE reply: a script met a key that holds a
// value of another kind than it expects.
func isWrongType(err error) bool { return err != nil && redis.HasErrorPrefix(err, "WRONGTYPE") }
