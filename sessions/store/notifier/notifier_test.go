package notifier

import "testing"

func TestEventChannelNames(t *testing.T) {
	for schema, want := range map[string]string{
		"":               "chatgate_events",
		"public":         "chatgate_events",
		"t_0123456789ab": "chatgate_events_t_0123456789ab",
	} {
		if got := Channel(schema); got != want {
			t.Errorf("Channel(%q) = %q, want %q", schema, got, want)
		}
	}
	long := Channel("a_schema_name_long_enough_to_push_the_channel_past_the_identifier_limit")
	if len(long) > 63 || long == Channel("another_schema_name_long_enough_to_push_the_channel_past_the_limit") {
		t.Errorf("long schema names: %q (%d bytes)", long, len(long))
	}
}
