package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// memoryMetrics count the notes kept and forgotten, and the extractions
// at reset by how they ended.
type memoryMetrics struct {
	written     *prometheus.CounterVec
	forgotten   prometheus.Counter
	extractions *prometheus.CounterVec
}

func newMemoryMetrics(reg *prometheus.Registry) *memoryMetrics {
	m := &memoryMetrics{
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_memory_notes_written_total",
			Help: "Notes kept about users, by author: model, user, operator, reset.",
		}, []string{"author"}),
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatgate_memory_notes_forgotten_total",
			Help: "Notes deleted at a user's, the model's or the operator's request.",
		}),
		extractions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatgate_memory_extractions_total",
			Help: "Extractions of notes at reset, by how they ended: done, skipped, refused (over budget), failed, due (to be tried again).",
		}, []string{"state"}),
	}
	reg.MustRegister(m.written, m.forgotten, m.extractions)
	for _, a := range []string{ledger.NoteByModel, ledger.NoteByUser, ledger.NoteByOperator, ledger.NoteByReset} {
		m.written.WithLabelValues(a)
	}
	for _, s := range []string{ledger.ExtractDone, ledger.ExtractSkipped, ledger.ExtractRefused, ledger.ExtractFailed, ledger.ExtractDue} {
		m.extractions.WithLabelValues(s)
	}
	return m
}

// NotesWritten implements sessions.Observer.
func (m *Metrics) NotesWritten(author string, n int) {
	m.memory.written.WithLabelValues(author).Add(float64(n))
}

// NotesForgotten implements sessions.Observer.
func (m *Metrics) NotesForgotten(n int) { m.memory.forgotten.Add(float64(n)) }

// ExtractionEnded implements sessions.Observer.
func (m *Metrics) ExtractionEnded(state string) { m.memory.extractions.WithLabelValues(state).Inc() }
