package telegramtest

import "fmt"

// Albums (media groups), as Telegram sends them: an album of up to ten
// pictures (or videos, or files) is not one update but one per item, each
// a message of its own — its own message_id and update_id, its own photo
// sizes — sharing a media_group_id. The caption, and its caption_entities,
// is on one item only (the one the user captioned; clients put it on the
// first), and a reply (reply_to_message, quote) is on every item. The
// updates follow one another, but nothing keeps them in one getUpdates
// answer: a limit, or a poll made while the client was still sending,
// splits them.

// NewAlbum returns a media_group_id not used before, for parts pushed one
// at a time (PushAlbumPart).
func (a *Server) NewAlbum() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.albums++
	return fmt.Sprintf("1350%013d", a.albums)
}

// PushAlbum pushes parts (Photo, Document… of one user and chat) as one
// album, one update each, in order, and returns its media_group_id and
// the parts' message ids.
func (a *Server) PushAlbum(parts ...map[string]any) (string, []int) {
	group := a.NewAlbum()
	ids := make([]int, len(parts))
	for i, p := range parts {
		ids[i] = a.PushAlbumPart(group, p)
	}
	return group, ids
}

// PushAlbumPart pushes one more part of album group (NewAlbum's, or
// PushAlbum's) and returns its message id.
func (a *Server) PushAlbumPart(group string, part map[string]any) int {
	part["media_group_id"] = group
	return a.Push(part)
}

// AlbumPhotos are the parts of a private-chat album of photos from user:
// one part per size given, which is the photo's full size (a 90×90
// thumbnail of it, never served, comes first, as Telegram sends sizes
// smallest first); the caption, if any, is on the first part only.
func AlbumPhotos(user int64, caption string, photos ...PhotoSize) []map[string]any {
	parts := make([]map[string]any, len(photos))
	for i, p := range photos {
		c := ""
		if i == 0 {
			c = caption
		}
		thumb := PhotoSize{FileID: "thumb-" + p.FileID, Width: 90, Height: 90, Size: 1000}
		parts[i] = Photo(user, c, thumb, p)
	}
	return parts
}
