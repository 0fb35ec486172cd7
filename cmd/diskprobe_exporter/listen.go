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
