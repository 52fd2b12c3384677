package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// newTracing returns the tracer provider of the turn spans and the func
// that flushes and stops it. Tracing is on only when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set (and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none):
// spans go over OTLP/HTTP, and the exporter reads the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, TLS) itself, the SDK
// OTEL_TRACES_SAMPLER and OTEL_BSP_*. Off, the provider is nil and the
// gateway makes no spans at all.
func newTracing(ctx context.Context, getenv func(string) (string, bool), log *slog.Logger) (trace.TracerProvider, func(context.Context) error, error) {
	off := func(context.Context) error { return nil }
	_, endpoint := getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	_, tracesEndpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if !endpoint && !tracesEndpoint {
		return nil, off, nil
	}
	if v, _ := getenv("OTEL_SDK_DISABLED"); strings.EqualFold(v, "true") {
		return nil, off, nil
	}
	if v, _ := getenv("OTEL_TRACES_EXPORTER"); strings.EqualFold(v, "none") {
		return nil, off, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v, ok := getenv(name); ok && v != "" {
			if v != "http/protobuf" {
				return nil, nil, fmt.Errorf("%s=%s: chatgate exports traces over OTLP/HTTP only; set it to http/protobuf or unset it", name, v)
			}
			break // the traces variable wins over the general one
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// service.name chatgate unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise (later detectors win).
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "chatgate"), attribute.String("service.version", versionString())),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// A failed export (the collector down) is the SDK's to report: into
	// the gateway's log rather than the standard logger.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans failed", slog.String("error", err.Error()))
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
