package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/mdlayher/vsock"
	"github.com/prometheus/exporter-toolkit/web"
)

// openListeners checks --web.config.file and opens the listen addresses, logging why not
// (then false): what a command does first, so that a typo there stops it before its work
// starts behind a server that never came up.
func openListeners(flags *web.FlagConfig, logger *slog.Logger) ([]net.Listener, bool) {
	if file := *flags.WebConfigFile; file != "" {
		if err := web.Validate(file); err != nil {
			logger.Error("invalid web configuration; not starting", "err", fmt.Errorf("--web.config.file=%s: %w", file, err))
			return nil, false
		}
	}
	listeners, err := listen(flags, logger)
	if err != nil {
		logger.Error("not starting", "err", err)
		return nil, false
	}
	return listeners, true
}

func closeListeners(listeners []net.Listener) {
	for _, l := range listeners {
		_ = l.Close()
	}
}

// listen opens what exporter-toolkit's web.ListenAndServe would listen on (systemd's
// sockets with --web.systemd-socket, else each --web.listen-address, vsock:// ones
// included), so that the server can be handed them held to the connection limit
// (web.ServeMultiple), and so that an address already in use stops the exporter before any
// probe starts.
func listen(flags *web.FlagConfig, logger *slog.Logger) ([]net.Listener, error) {
	if flags.WebSystemdSocket != nil && *flags.WebSystemdSocket {
		logger.Info("Listening on systemd activated listeners instead of port listeners.")
		listeners, err := activation.Listeners()
		if err != nil {
			return nil, fmt.Errorf("systemd socket activation: %w", err)
		}
		if len(listeners) == 0 {
			return nil, errors.New("no socket activation file descriptors found")
		}
		return listeners, nil
	}
	if flags.WebListenAddresses == nil || len(*flags.WebListenAddresses) == 0 {
		return nil, errors.New("no --web.listen-address and no --web.systemd-socket")
	}
	var listeners []net.Listener
	for _, address := range *flags.WebListenAddresses {
		l, err := listenOn(address)
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return nil, fmt.Errorf("--web.listen-address=%s: %w", address, err)
		}
		listeners = append(listeners, l)
	}
	return listeners, nil
}

func listenOn(address string) (net.Listener, error) {
	if !strings.HasPrefix(address, "vsock://") {
		return net.Listen("tcp", address)
	}
	u, err := url.Parse(address)
	if err != nil {
		return nil, err
	}
	_, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 32)
	if err != nil {
		return nil, err
	}
	return vsock.Listen(uint32(port), nil)
}
