{{- define "steward.labels" -}}
app.kubernetes.io/name: steward
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: steward
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "steward.selector" -}}
app.kubernetes.io/name: steward
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "steward.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- define "steward.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (printf "%s-operator" .Release.Name) }}
{{- else -}}
{{ required "serviceAccount.name: name the ServiceAccount to run the operator as when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}
{{- /* The release's labels for its monitoring objects, with the user's extra labels: ours win
       where both name the same key. */}}
{{- define "steward.monitoringLabels" -}}
{{- $labels := include "steward.labels" .root | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/component" "monitoring" -}}
{{- toYaml (merge $labels .extra) -}}
{{- end -}}
