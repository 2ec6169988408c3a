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
