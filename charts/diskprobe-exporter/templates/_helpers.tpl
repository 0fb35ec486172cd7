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
