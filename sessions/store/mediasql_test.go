package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// A claim on an item is its delivery's own: another delivery finds the
// item cut off and cannot drop the claim; the delivery that made it finds
// it its own when it claims again (its first answer lost), counted once,
// and drops it whether or not it knew it had landed.
func TestMediaClaimIsItsDeliverysOwn(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		item := ledger.ToolMedia{ID: "9a7f0e1c-0000-4000-8000-000000000001", ConversationID: "c1", TurnSeq: 1, ToolCallID: 1,
			Kind: "image", Mime: "image/png", Data: []byte("png")}
		if err := insertToolMedia(db.Gorm(), []ledger.ToolMedia{item}); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		claim := func(who string, want ledger.MediaClaim, wantClaims int) {
			t.Helper()
			got, n, err := db.ClaimMediaSend(ctx, item.ID, who, at)
			if err != nil || got != want || n != wantClaims {
				t.Fatalf("claim by %s = %v, %d claims, %v; want %v, %d", who, got, n, err, want, wantClaims)
			}
		}
		release := func(who string) {
			t.Helper()
			if err := db.ReleaseMediaSend(ctx, item.ID, who); err != nil {
				t.Fatal(err)
			}
		}
		claim("a", ledger.MediaClaimed, 1)
		claim("a", ledger.MediaClaimed, 1) // made again: its own, counted once
		claim("b", ledger.MediaCut, 1)
		release("b") // not b's claim: it stands
		claim("c", ledger.MediaCut, 1)
		release("a")
		release("a") // dropped already: nothing to drop
		claim("b", ledger.MediaClaimed, 2)
		if _, err := db.MarkMediaDelivered(ctx, item.ID, "42", at); err != nil {
			t.Fatal(err)
		}
		release("b") // delivered: the mark stays
		claim("b", ledger.MediaDelivered, 2)
		if _, _, err := db.ClaimMediaSend(ctx, item.ID, "", at); err == nil {
			t.Fatal("a claim that names no delivery was taken")
		}
	})
}

// A mark's ref longer than its column (a long error after "unsure: ")
// is stored cut to it, not refused — PostgreSQL refuses text over a
// varchar's size for good.
func TestMediaMarkWithALongRefIsCut(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		item := ledger.ToolMedia{ID: "9a7f0e1c-0000-4000-8000-000000000002", ConversationID: "c1", TurnSeq: 1, ToolCallID: 1,
			Kind: "image", Mime: "image/png", Data: []byte("png")}
		if err := insertToolMedia(db.Gorm(), []ledger.ToolMedia{item}); err != nil {
			t.Fatal(err)
		}
		ref := ledger.MediaUnsureRef + strings.Repeat("é", 2*ledger.MaxDeliveryRef)
		if ok, err := db.MarkMediaDelivered(ctx, item.ID, ref, time.Now()); err != nil || !ok {
			t.Fatalf("mark with a long ref: %v, %v", ok, err)
		}
		got, err := db.ToolMediaInfo(ctx, item.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := string([]rune(ref)[:ledger.MaxDeliveryRef]); got.DeliveryRef != want {
			t.Fatalf("ref stored: %d characters, want the first %d", len([]rune(got.DeliveryRef)), ledger.MaxDeliveryRef)
		}
	})
}
