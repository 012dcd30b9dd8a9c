{{/* Prefix of object names: nameOverride, else the release name. */}}
{{- define "nodesmith.prefix" -}}
{{- default .Release.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodesmith.coordinator" -}}
{{- include "nodesmith.prefix" . }}-coordinator
{{- end -}}

{{/* The Lease the replicas elect a leader with. */}}
{{- define "nodesmith.leaseName" -}}
{{- default (include "nodesmith.coordinator" .) (index .Values.config "lease-name") -}}
{{- end -}}

{{- define "nodesmith.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodesmith.coordinator" . }}
{{- end -}}

{{/* On every object. */}}
{{- define "nodesmith.labels" -}}
app.kubernetes.io/part-of: nodesmith
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* coordinator.conf: the non-empty settings of .Values.config, plus the Lease's namespace. */}}
{{- define "nodesmith.config" -}}
# nodesmith-coordinator settings (mounted at /etc/nodesmith/coordinator.conf), from the chart's
# values (config:). Addresses and file paths are set on the Deployment's command line.
{{- $cfg := deepCopy .Values.config }}
{{- if eq (toString (index $cfg "cluster-name")) "" }}
{{- fail "config.cluster-name: name the cluster nodesmith provisions for (the nodesmith.io/cluster tag of its instances); the coordinator refuses to start without it" }}
{{- end }}
{{- if eq (toString (index $cfg "lease-namespace")) "" }}
{{- $_ := set $cfg "lease-namespace" .Release.Namespace }}
{{- end }}
{{- if eq (toString (index $cfg "lease-name")) "" }}
{{- $_ := set $cfg "lease-name" (include "nodesmith.leaseName" .) }}
{{- end }}
{{- range $k, $v := $cfg }}
{{- if ne (toString $v) "" }}
{{- if regexMatch "[\n\r]" (toString $v) }}
{{- fail (printf "config.%s: a value holds a line break" $k) }}
{{- end }}
{{ $k }} = {{ $v }}
{{- end }}
{{- end }}
{{- end -}}
