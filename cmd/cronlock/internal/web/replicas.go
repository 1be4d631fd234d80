package web

import (
	"context"
	"net/http"
	"time"

	"github.com/cronlock/cronlock/scheduler"
)

// ReplicaView is one replica of the cluster as GET /replicas shows it (scheduler.Replica).
type ReplicaView struct {
	Name    string `json:"name"`
	Alive   bool   `json:"alive"`
	Version string `json:"version"`
	// Started and LastSeen are on the replica's clock; MissingSince is LastSeen when the
	// replica is missing, else absent.
	Started      time.Time  `json:"started"`
	LastSeen     time.Time  `json:"last_seen"`
	MissingSince *time.Time `json:"missing_since,omitempty"`
	// HeartbeatSeconds is its heartbeat interval; it is missing MissingAfterSeconds after
	// LastSeen.
	HeartbeatSeconds    float64  `json:"heartbeat_seconds"`
	MissingAfterSeconds float64  `json:"missing_after_seconds"`
	Jobs                []string `json:"jobs"`
	ConfigHash          string   `json:"config_hash"`
	ConfigDiffers       bool     `json:"config_differs"`
	Running             int      `json:"running"`
}

// replicasRead is one read of the cluster's replicas, for every page of the next PageCache.
type replicasRead struct {
	replicas []scheduler.Replica
	err      string // the nodes could not be read (by a quorum)
}

func (c *control) readReplicas(ctx context.Context) replicasRead {
	rs, err := c.sched.Control().Replicas(ctx)
	read := replicasRead{replicas: rs}
	if err != nil {
		read.err = err.Error()
	}
	return read
}

// replicaViews returns rs as GET /replicas shows them.
func replicaViews(rs []scheduler.Replica) []ReplicaView {
	out := make([]ReplicaView, 0, len(rs))
	for _, r := range rs {
		v := ReplicaView{Name: r.Name, Alive: r.Alive, Version: r.Version, Started: r.Started.UTC(), LastSeen: r.LastSeen.UTC(),
			HeartbeatSeconds: r.Heartbeat.Seconds(), MissingAfterSeconds: r.MissingAfter.Seconds(), Jobs: r.Jobs,
			ConfigHash: r.ConfigHash, ConfigDiffers: r.ConfigDiffers, Running: r.Running}
		if !r.Alive {
			v.MissingSince = &v.LastSeen
		}
		out = append(out, v)
	}
	return out
}

// replicasAPI serves GET /replicas: every replica of the cluster, from the nodes (at most once
// per PageCache); 503 when fewer than a quorum of nodes answered and nothing could be read.
func (c *control) replicasAPI(w http.ResponseWriter, r *http.Request) {
	read := c.replicas.get(r.Context())
	if read.err != "" && read.replicas == nil {
		details := c.bearer(r)
		msg := "the lock nodes could not be read (the details go with the bearer token)"
		if details {
			msg = read.err
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Replica  string        `json:"replica"`
		Replicas []ReplicaView `json:"replicas"`
	}{c.replica, replicaViews(read.replicas)})
}
