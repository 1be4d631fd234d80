package ctxsleep

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Nanosecond) {
		t.Error("Sleep(background, 1ns) = false, want true: the duration passed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep(cancelled, 1h) = true, want false: the context ended first")
	}
}
