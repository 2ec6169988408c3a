{{/* The labels of everything the chart makes. */}}
{{- define "kafleet.labels" -}}
app.kubernetes.io/name: kafleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The labels that select the operator's pod (unchanged since the first release: a
Deployment's selector cannot change). */}}
{{- define "kafleet.selectorLabels" -}}
app.kubernetes.io/name: kafleet-operator
{{- end }}

{{/* The ServiceAccount the operator runs as, and the RBAC binds. */}}
{{- define "kafleet.serviceAccountName" -}}
{{- required "serviceAccount.name: name the operator's ServiceAccount" .Values.serviceAccount.name }}
{{- end }}

{{/* A Prometheus duration (30s, 1m30s, 500ms) in seconds. */}}
{{- define "kafleet.seconds" -}}
{{- $units := dict "y" 31536000.0 "w" 604800.0 "d" 86400.0 "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(ms|[ywdhms])" . -1 -}}
{{- $total = addf $total (mulf (regexFind "^[0-9]+" . | float64) (get $units (regexReplaceAll "^[0-9]+" . ""))) -}}
{{- end -}}
{{- $total -}}
{{- end }}
