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

// Two deliveries of one item at once (a failover's and the recovery
// pass's): the one whose update claimed the item has it, whatever the
// other made of the item before the winner read it back — it found the
// claim standing and takes the item as cut off, marks it so, and the
// winner's send still counts. A claim whose item is gone by its read
// (purged meanwhile) is no claim.
func TestMediaClaimRacedBetweenItsUpdateAndItsRead(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		items := []ledger.ToolMedia{
			{ID: "9a7f0e1c-0000-4000-8000-000000000003", ConversationID: "c1", TurnSeq: 1, ToolCallID: 1, Kind: "image", Mime: "image/png", Data: []byte("png")},
			{ID: "9a7f0e1c-0000-4000-8000-000000000004", ConversationID: "c1", TurnSeq: 1, ToolCallID: 2, Kind: "image", Mime: "image/png", Data: []byte("png")},
		}
		if err := insertToolMedia(db.Gorm(), items); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		var other ledger.MediaClaim
		db.afterMediaClaim = func() {
			db.afterMediaClaim = nil
			var err error
			if other, _, err = db.ClaimMediaSend(ctx, items[0].ID, "b", at); err != nil {
				t.Error(err)
			}
			if _, err := db.MarkMediaDelivered(ctx, items[0].ID, ledger.MediaUnsureRef+"cut off", at); err != nil {
				t.Error(err)
			}
		}
		got, n, err := db.ClaimMediaSend(ctx, items[0].ID, "a", at)
		if err != nil || got != ledger.MediaClaimed || n != 1 || other != ledger.MediaCut {
			t.Fatalf("a's claim = %v (%d claims, %v), b's in between = %v; want a claimed once, b cut off", got, n, err, other)
		}

		db.afterMediaClaim = func() {
			db.afterMediaClaim = nil
			if err := db.Gorm().Exec("DELETE FROM tool_media WHERE id = ?", items[1].ID).Error; err != nil {
				t.Error(err)
			}
		}
		if got, _, err := db.ClaimMediaSend(ctx, items[1].ID, "a", at); err != nil || got != ledger.MediaGone {
			t.Fatalf("a claim whose item went before its read = %v, %v; want gone", got, err)
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
