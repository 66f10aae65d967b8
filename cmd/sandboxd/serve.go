package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/daemon"
)

var errUsage = errors.New("usage")

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

const defaultConfigFile = "/etc/sandboxd/config.toml"

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var listen listFlag
	fs.Var(&listen, "listen", "listen on `ADDR` (tcp://HOST:PORT or unix:///PATH); repeatable")
	stateDir := fs.String("state-dir", "", "state directory (event logs, workspaces, token)")
	tokenFile := fs.String("token-file", "", "read the API token from `FILE`")
	configFile := fs.String("config", "", "configuration `FILE` (TOML); default "+defaultConfigFile+" when it exists")
	logLevel := fs.String("log-level", "", "debug, info, warn or error")
	insecure := fs.Bool("allow-insecure-listen", false, "allow TCP listeners on non-loopback addresses without TLS")
	var sets listFlag
	fs.Var(&sets, "set", "set a configuration `KEY=VALUE` (e.g. containerd.socket=/run/containerd/containerd.sock); repeatable")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve takes no arguments (got %q)\n", fs.Args())
		return errUsage
	}
	cfg := daemon.DefaultConfig()
	path := *configFile
	if path == "" {
		if _, err := os.Stat(defaultConfigFile); err == nil {
			path = defaultConfigFile
		}
	}
	if path != "" {
		var err error
		if cfg, err = daemon.LoadConfig(path); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	// Flags override the file.
	if len(listen) > 0 {
		cfg.Listen = listen
	}
	if *stateDir != "" {
		cfg.StateDir = *stateDir
	}
	if *tokenFile != "" {
		cfg.TokenFile = *tokenFile
	}
	if *logLevel != "" {
		cfg.LogLevel = *logLevel
	}
	if *insecure {
		cfg.AllowInsecureListen = true
	}
	for _, kv := range sets {
		if err := daemon.SetConfig(&cfg, kv); err != nil {
			return err
		}
	}
	log, err := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	d, err := daemon.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return d.Run(ctx, nil)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func versionString() string {
	v := daemon.Version
	if v == "" {
		v = "dev"
	}
	return "sandboxd " + v
}
