// diskprobe_exporter's monitoring mixin, in the shape kube-prometheus and the etcd and node
// mixins use: prometheusAlerts, prometheusRules, grafanaDashboards and _config.
//
// One source: the groups are those of alerts/diskprobe.rules.yml and the dashboards those of
// dashboards/*.json, read from the files (a Go test checks the mixin's output equals them).
// Vendor the whole repository (jsonnet-bundler), or this directory with alerts/ and
// dashboards/ beside it.
local ruleFile = std.parseYaml(importstr '../alerts/diskprobe.rules.yml');
local dashboardFiles = {
  'diskprobe-fleet.json': importstr '../dashboards/diskprobe-fleet.json',
  'diskprobe-target.json': importstr '../dashboards/diskprobe-target.json',
};

// The selector the shipped rules use for the exporter's own scrape (up, absent).
local defaultSelector = 'job=~".*diskprobe.*"';
// The runbook the shipped rules' runbook_url annotations point at.
local defaultRunbook = 'https://github.com/diskprobe/diskprobe_exporter/blob/main/docs/runbook.md';
// The labels that make a group of peers in the shipped rules (the diskprobe.peers group).
local defaultPeerGroupLabels = 'job, cluster, peer_group, target';
// The label matcher that makes a series a member of a group of peers in the shipped rules.
local defaultPeerGroupSelector = 'peer_group!=""';
// The label matcher of the exporter's DaemonSets in kube-state-metrics' series (the inventory
// DiskprobeDaemonSetIncomplete compares the scraped exporters with).
local defaultDaemonSetSelector = 'daemonset=~".*diskprobe.*"';

{
  _config+:: {
    // Selects the exporter's scrape job; replaces the rules' job=~".*diskprobe.*".
    diskprobeSelector: defaultSelector,
    // `for:` of an alert, by alert name, e.g. {DiskprobeFdatasyncP99AboveEtcdTarget: '30m'}.
    alertFor: {},
    // Labels added to every alert, e.g. {team: 'storage'}.
    alertLabels: {},
    // The labels whose values make a group of peers (the same target on the instances of a job,
    // within an etcd cluster), e.g. 'job, namespace, target'. Keep `instance` out of it: it is the
    // member. The peer alerts' annotations find the group from the alert's own labels, whatever
    // they are. The target dashboard's peer panels follow it.
    peerGroupLabels: defaultPeerGroupLabels,
    // Which series are members of a group of peers, a PromQL label matcher: by default those with
    // a non-empty peer_group label (no label, no group: never one fleet-wide group; not
    // `cluster`, which a multi-cluster Prometheus puts on every series), e.g. 'target="etcd"'
    // when one job's etcd targets are one cluster (per `cluster`), 'namespace!=""'.
    peerGroupSelector: defaultPeerGroupSelector,
    // Which DaemonSets run the exporter, a PromQL label matcher on kube-state-metrics'
    // kube_daemonset_status_* series, e.g. 'namespace="monitoring", daemonset="diskprobe-exporter"'.
    // Without kube-state-metrics the alert has no series and is silent.
    daemonSetSelector: defaultDaemonSetSelector,
    // Where each alert's runbook_url points: the runbook's URL, the alert's anchor appended,
    // e.g. 'https://git.example.com/ops/diskprobe/runbook.md' for a copy on your own wiki or Git
    // host (the runbook also ships in the .deb/.rpm as /usr/share/doc/diskprobe-exporter/runbook.md).
    runbookURLBase: defaultRunbook,
  },

  local cfg = self._config,
  local isAlert(r) = std.objectHas(r, 'alert'),
  local rule(r) =
    r { expr: std.strReplace(std.strReplace(std.strReplace(std.strReplace(r.expr, defaultSelector, cfg.diskprobeSelector), defaultPeerGroupLabels, cfg.peerGroupLabels), defaultPeerGroupSelector, cfg.peerGroupSelector), defaultDaemonSetSelector, cfg.daemonSetSelector) }
    + (if isAlert(r) && std.objectHas(cfg.alertFor, r.alert) then { 'for': cfg.alertFor[r.alert] } else {})
    + (if isAlert(r) && std.length(cfg.alertLabels) > 0 then { labels+: cfg.alertLabels } else {})
    + (if isAlert(r) && std.objectHas(r, 'annotations') && std.objectHas(r.annotations, 'runbook_url') then
         { annotations+: { runbook_url: std.strReplace(r.annotations.runbook_url, defaultRunbook, cfg.runbookURLBase) } } else {}),
  local groups(alerting) = [
    g { rules: [rule(r) for r in g.rules] }
    for g in ruleFile.groups
    if std.length([r for r in g.rules if isAlert(r)]) > 0 == alerting
  ],

  prometheusAlerts+:: { groups+: groups(true) },
  prometheusRules+:: { groups+: groups(false) },
  grafanaDashboards+:: {
    // The target dashboard's peer panels join on the group's labels, as the rules do.
    [name]: std.parseJson(std.strReplace(std.strReplace(dashboardFiles[name], defaultSelector, cfg.diskprobeSelector), defaultPeerGroupLabels, cfg.peerGroupLabels))
    for name in std.objectFields(dashboardFiles)
  },
}
