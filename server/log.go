package server

import (
	"io"
	"log/slog"
)

// NewLogger returns the logger -log-format and -log-level ask for.
func NewLogger(w io.Writer, o Options) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(o.LogLevel))
	ho := &slog.HandlerOptions{Level: level}
	if o.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}
