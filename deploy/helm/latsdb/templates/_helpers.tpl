{{/* The prefix of every object's name. */}}
{{- define "latsdb.name" -}}
{{- printf "%s" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "latsdb.labels" -}}
app.kubernetes.io/name: latsdb
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "latsdb.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* The management server's address, as data nodes and API nodes reach it. */}}
{{- define "latsdb.mgmdAddress" -}}
{{ include "latsdb.name" . }}-mgmd-0.{{ include "latsdb.name" . }}-mgmd.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:{{ .Values.mgmd.port }}
{{- end -}}

{{/* The pods' user: the image's (deploy/Dockerfile), owning the volumes. */}}
{{- define "latsdb.securityContext" -}}
securityContext:
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
{{- end -}}

{{/* Scrape annotations for Prometheus. */}}
{{- define "latsdb.scrape" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ . | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{/* Node affinity to one zone (the argument), or nothing for "". */}}
{{- define "latsdb.zoneAffinity" -}}
{{- if . }}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - key: topology.kubernetes.io/zone
            operator: In
            values: [{{ . | quote }}]
{{- end }}
{{- end -}}
