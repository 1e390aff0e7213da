#!/bin/sh
# Installs the Debian packages the e2e node needs (containerd, runc, the CNI plugins,
# iptables and the tools kube-proxy calls) when any is missing.
set -eu
need=""
for c in containerd:containerd runc:runc iptables:iptables conntrack:conntrack socat:socat ipset:ipset ethtool:ethtool; do
	command -v "${c%%:*}" >/dev/null 2>&1 || need="$need ${c#*:}"
done
[ -x /usr/lib/cni/bridge ] || need="$need containernetworking-plugins"
[ -z "$need" ] && exit 0
echo "installing Debian packages:$need"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $need >/dev/null
