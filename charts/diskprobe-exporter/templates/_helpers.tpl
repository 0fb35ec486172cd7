{{/* Names and labels, as `helm create` makes them. */}}
{{- define "diskprobe-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "diskprobe-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "diskprobe-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "diskprobe-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "diskprobe-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "diskprobe-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "diskprobe-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "diskprobe-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The exporter's configuration file, as the ConfigMap holds it. */}}
{{- define "diskprobe-exporter.config" -}}
# Rendered by the diskprobe-exporter chart from .Values.config.
{{ toYaml .Values.config }}
{{- end }}

{{/* "true" when the container must be privileged: a block device target (path under /dev/). */}}
{{- define "diskprobe-exporter.privileged" -}}
{{- if eq (toString .Values.privileged) "auto" }}
{{- $dev := false }}
{{- range .Values.config.targets }}{{ if hasPrefix "/dev/" .path }}{{ $dev = true }}{{ end }}{{ end }}
{{- $dev }}
{{- else }}
{{- .Values.privileged }}
{{- end }}
{{- end }}

{{/* "true" when a prometheus-operator object is to be rendered: enabled and its kind served by
     the cluster (.Capabilities: helm install/upgrade ask the API server; helm template knows only
     what --api-versions names), or forceEnable. Without the CRDs, applying one fails the whole
     install with "no matches for kind". Arguments: (list $ .Values.<object> "<Kind>"). */}}
{{- define "diskprobe-exporter.monitoringObject" -}}
{{- $root := index . 0 }}{{- $v := index . 1 }}{{- $kind := index . 2 }}
{{- or $v.forceEnable (and $v.enabled ($root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind))) }}
{{- end }}

{{/* A volume name for a host path. */}}
{{- define "diskprobe-exporter.volumeName" -}}
{{- printf "host-%s" (sha256sum . | trunc 10) }}
{{- end }}

{{/* The labels of a prometheus-operator object: monitoringLabels with a value, then the
     object's own labels. Argument: (list $ .Values.<object>.labels). */}}
{{- define "diskprobe-exporter.monitoringLabels" -}}
{{- $root := index . 0 }}{{- $own := index . 1 }}
{{- $labels := dict }}
{{- range $k, $v := $root.Values.monitoringLabels }}{{ if $v }}{{ $_ := set $labels $k $v }}{{ end }}{{ end }}
{{- range $k, $v := $own }}{{ $_ := set $labels $k $v }}{{ end }}
{{- with $labels }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* The rule file's text (alerts/diskprobe.rules.yml, copied into files/ by `make chart-files`)
     with the values that adapt it applied: the runbook URL, the exporter's job selector, the
     peer group labels and selector, and the DaemonSet selector (default: this release's
     DaemonSet). The PrometheusRule and the rules ConfigMap hold the same rules. */}}
{{- define "diskprobe-exporter.rules" -}}
{{- $rules := .Files.Get "files/diskprobe.rules.yml" }}
{{- with .Values.prometheusRule.runbookUrlBase }}
{{- $rules = replace "https://github.com/diskprobe/diskprobe_exporter/blob/main/docs/runbook.md" (trimSuffix "/" .) $rules }}
{{- end }}
{{- $rules = replace "job=~\".*diskprobe.*\"" .Values.diskprobeSelector $rules }}
{{- $rules = replace "peer_group!=\"\"" .Values.peerGroupSelector $rules }}
{{- $ds := .Values.daemonSetSelector | default (printf "namespace=%q, daemonset=%q" .Release.Namespace (include "diskprobe-exporter.fullname" .)) }}
{{- $rules = replace "daemonset=~\".*diskprobe.*\"" $ds $rules }}
{{- replace "job, cluster, peer_group, target" .Values.peerGroupLabels $rules }}
{{- end }}

{{/* A map of labels as k=v, comma-separated, for NOTES.txt. */}}
{{- define "diskprobe-exporter.labelList" -}}
{{- $l := list }}{{ range $k, $v := . }}{{ $l = append $l (printf "%s=%s" $k $v) }}{{ end }}{{ join ", " $l }}
{{- end }}

{{/*
The image: repository@digest when image.digest pins one, else repository:tag (tag defaulting
to the chart's appVersion, the release the image is published under).
*/}}
{{- define "diskprobe-exporter.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* What the exporter's pods share, the DaemonSet's and the storage-class StatefulSets': the
     pod-level settings, the `serve` arguments, health checks and the node's /proc and /sys.
     Argument: the root context. */}}
{{- define "diskprobe-exporter.podBasics" -}}
serviceAccountName: {{ include "diskprobe-exporter.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automount }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{- define "diskprobe-exporter.serveArgs" -}}
- --config.file=/etc/diskprobe_exporter/diskprobe.yml
- --path.procfs=/host/proc
- --path.sysfs=/host/sys
- --web.listen-address=:{{ .Values.containerPort }}
{{- if .Values.webConfig.secretName }}
- --web.config.file=/etc/diskprobe_exporter/web/web-config.yml
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Liveness and readiness of a container serving its metrics on the port named metrics. */}}
{{- define "diskprobe-exporter.healthChecks" -}}
{{- if .Values.webConfig.secretName }}
# TLS or basic auth cover every path, so the kubelet only checks the port.
livenessProbe:
  tcpSocket: {port: metrics}
readinessProbe:
  tcpSocket: {port: metrics}
{{- else }}
livenessProbe:
  httpGet: {path: /-/healthy, port: metrics}
readinessProbe:
  httpGet: {path: /-/ready, port: metrics}
{{- end }}
{{- end }}

{{/* The config file, the node's /proc and /sys (read-only: device identity and context) and
     the web config, as the container mounts them. */}}
{{- define "diskprobe-exporter.serveMounts" -}}
- name: config
  mountPath: /etc/diskprobe_exporter/diskprobe.yml
  subPath: diskprobe.yml
  readOnly: true
- name: proc
  mountPath: /host/proc
  readOnly: true
- name: sys
  mountPath: /host/sys
  readOnly: true
{{- if .Values.webConfig.secretName }}
- name: web-config
  mountPath: /etc/diskprobe_exporter/web
  readOnly: true
{{- end }}
{{- end }}

{{/* The volumes of serveMounts. Arguments: (list $ "<the ConfigMap holding diskprobe.yml>"). */}}
{{- define "diskprobe-exporter.serveVolumes" -}}
{{- $root := index . 0 }}
- name: config
  configMap:
    name: {{ index . 1 }}
- name: proc
  hostPath:
    path: {{ $root.Values.hostProc }}
    type: Directory
- name: sys
  hostPath:
    path: {{ $root.Values.hostSys }}
    type: Directory
{{- if $root.Values.webConfig.secretName }}
- name: web-config
  secret:
    secretName: {{ $root.Values.webConfig.secretName }}
{{- end }}
{{- end }}

{{/* Which prometheus-operator object scrapes the pods: "service" (a Service and a
     ServiceMonitor), "pod" (a PodMonitor) or "" (neither; the Service alone when
     service.enabled). The same switch for the DaemonSet, the storage classes and the arrival
     prober. */}}
{{- define "diskprobe-exporter.scrapeObject" -}}
{{- $podMonitor := or .Values.podMonitor.enabled .Values.podMonitor.forceEnable }}
{{- if eq (include "diskprobe-exporter.monitoringObject" (list . .Values.podMonitor "PodMonitor")) "true" }}pod
{{- else if and (not $podMonitor) .Values.service.enabled (eq (include "diskprobe-exporter.monitoringObject" (list . .Values.serviceMonitor "ServiceMonitor")) "true") }}service
{{- end }}
{{- end }}

{{/* The fields of a ServiceMonitor endpoint or PodMonitor podMetricsEndpoint after port and
     path: interval, timeout, a comment on the chart's relabelings, those relabelings (YAML list
     items, text) then the user's, and the web config.
     Arguments: (list .Values.<serviceMonitor|podMonitor> "<# comment>" "<relabelings>"). */}}
{{- define "diskprobe-exporter.endpointFields" -}}
{{- $v := index . 0 -}}
interval: {{ $v.interval }}
scrapeTimeout: {{ $v.scrapeTimeout }}
{{ index . 1 }}
relabelings:
  {{- index . 2 | trim | nindent 2 }}
  {{- with $v.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $v.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.scheme }}
scheme: {{ . }}
{{- end }}
{{- with $v.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The labels of the pods of a component beside the DaemonSet (storageclass, arrival): their
     own app.kubernetes.io/name, so that the DaemonSet's Service, monitors and selectors
     (name and instance) never take them in. Arguments: (list $ "<component>"). */}}
{{- define "diskprobe-exporter.componentSelectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "diskprobe-exporter.name" $root) (index . 1) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* The labels of the objects of such a component: not the DaemonSet's name, so that its
     ServiceMonitor, which selects Services by name and instance, never takes in theirs.
     Arguments: (list $ "<component>"). */}}
{{- define "diskprobe-exporter.componentLabels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "diskprobe-exporter.componentSelectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
{{- end }}

{{/* A name for an object of this release with a suffix, within max characters: cut and
     made unique with a hash when too long. Arguments: (list $ "<suffix>" <max>). */}}
{{- define "diskprobe-exporter.suffixedName" -}}
{{- $n := printf "%s-%s" (include "diskprobe-exporter.fullname" (index . 0)) (index . 1) }}
{{- $max := int (index . 2) }}
{{- if gt (len $n) $max }}
{{- $n = printf "%s-%s" (trunc (sub $max 7 | int) $n | trimSuffix "-") (sha256sum $n | trunc 6) }}
{{- end }}
{{- $n }}
{{- end }}

{{/* A storage class's StatefulSet (and ConfigMap): <fullname>-sc-<class>, the class's dots
     made dashes; at most 52 characters, so that the pods' controller-revision-hash label
     stays under 63. Arguments: (list $ "<class>"). */}}
{{- define "diskprobe-exporter.classFullname" -}}
{{- include "diskprobe-exporter.suffixedName" (list (index . 0) (printf "sc-%s" (replace "." "-" (index . 1))) 52) }}
{{- end }}

{{/* A storageClasses entry with its defaults, as YAML. Argument: the entry. */}}
{{- define "diskprobe-exporter.class" -}}
{{- $defaults := dict "size" "1Gi" "accessMode" "ReadWriteOnce" "volumeMode" "Filesystem" "spread" "node" "replicas" 3 "etcdGrade" false "arrival" true "target" (dict) }}
{{- $c := deepCopy . }}
{{- /* Not merge: it takes a false or 0 of the entry for unset. */}}
{{- range $k, $v := $defaults }}{{ if not (hasKey $c $k) }}{{ $_ := set $c $k $v }}{{ end }}{{ end }}
{{- toYaml $c }}
{{- end }}

{{/* The device node a Block class's volume appears as in the pod. */}}
{{- define "diskprobe-exporter.classDevice" -}}/dev/diskprobe-pvc{{- end }}

{{/* The exporter's configuration for a storage class: one target named after the class, on
     /data (the volume, Filesystem) or the volume's device node (Block, read probes only, as
     a /dev target of the DaemonSet), the entry's target keys merged in. min_free defaults to
     100MiB: the exporter's 1GiB would stop the write probes on a 1Gi volume for good.
     Argument: the entry with its defaults. */}}
{{- define "diskprobe-exporter.classConfig" -}}
{{- $block := eq .volumeMode "Block" }}
{{- range $key := list "name" "path" "probe_dir" "vantage" }}
{{- if hasKey $.target $key }}
{{- fail (printf "storageClasses: %s: target.%s is the chart's to set (the class's name; /data or its device)" $.name $key) }}
{{- end }}
{{- end }}
{{- /* Built by hand, not with merge: merge takes a 0 or false of the user's for unset. */}}
{{- $target := dict "name" .name "path" (ternary (include "diskprobe-exporter.classDevice" .) "/data" $block) }}
{{- range $k, $v := .target }}{{ $_ := set $target $k (deepCopy $v) }}{{ end }}
{{- if $block }}
{{- range $key := list "fsync" "commit" "seqwrite" }}
{{- if hasKey $.target $key }}
{{- fail (printf "storageClasses: %s: target.%s: a Block volume is probed read-only (randread, seqread), as a block device target is" $.name $key) }}
{{- end }}
{{- end }}
{{- else }}
{{- $limits := $target.limits | default dict }}
{{- if not (hasKey $limits "min_free") }}{{ $_ := set $limits "min_free" "100MiB" }}{{ end }}
{{- $_ := set $target "limits" $limits }}
{{- end }}
{{- "# Rendered by the diskprobe-exporter chart from storageClasses (" }}{{ .name }}).
targets:
  - name: {{ $target.name }}
    path: {{ $target.path }}
    {{- with omit $target "name" "path" }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The storage classes the arrival prober visits: those with arrival true, when
     arrival.enabled. Argument: the root context. Output: their names, one per line. */}}
{{- define "diskprobe-exporter.arrivalClasses" -}}
{{- if .Values.arrival.enabled }}
{{- range .Values.storageClasses }}
{{- $c := include "diskprobe-exporter.class" . | fromYaml }}
{{- if $c.arrival }}
{{ $c.name }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
