#!/usr/bin/env bash
# Installs the Debian packages the tests (or benchmarks) need when they are missing.
# As root it runs apt-get; otherwise it names the packages and fails, so nothing is half set up.
set -euo pipefail

# command (or absolute path) -> Debian package that provides it
declare -A need=(
  [fio]=fio
  [promtool]=prometheus
  [prometheus]=prometheus
  [rpm]=rpm
  [rpm2cpio]=rpm
  [cpio]=cpio
  [mkfs.ext4]=e2fsprogs
  [mkfs.btrfs]=btrfs-progs
  [losetup]=mount
  [fsfreeze]=util-linux
  [sfdisk]=fdisk
  [setpriv]=util-linux
  [systemd-analyze]=systemd
  [dpkg-deb]=dpkg
  # The distributions' linters on the packages (tests/packaging); rpmlint unpacks with cpio.
  [lintian]=lintian
  [rpmlint]=rpmlint
  [cpio]=cpio
  # The real-systemd tier (tests/systemd): a Debian root booted with systemd-nspawn.
  [debootstrap]=debootstrap
  [systemd-nspawn]=systemd-container
  [etcd]=etcd-server
  [etcdctl]=etcd-client
  [podman]=podman
  [runc]=runc
  # The Kubernetes test tier (tests/internal/k8senv): a private containerd, the CNI plugins.
  [containerd]=containerd
  [ctr]=containerd
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [/usr/lib/cni/host-local]=containernetworking-plugins
  [/usr/lib/cni/loopback]=containernetworking-plugins
  [iptables]=iptables
  [nsenter]=util-linux
  [unshare]=util-linux
  # kube-router's network policy controller (NetworkPolicies in the cluster tests).
  [ipset]=ipset
  # The storage-class tests' helper image (the provisioner's mkdir and rm): a static busybox.
  [/bin/busybox]=busybox-static
  # tests/release: the arm64 release binary run under qemu-user.
  [qemu-aarch64-static]=qemu-user-static
)
for extra in "$@"; do need[${extra%%=*}]=${extra#*=}; done

missing=()
for cmd in "${!need[@]}"; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')

if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages: $pkgs" >&2
  echo "install them with: sudo apt-get install -y $pkgs" >&2
  exit 1
fi
echo "installing: $pkgs"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
