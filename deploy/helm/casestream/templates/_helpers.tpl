{{/* Common labels of every object of the release. */}}
{{- define "casestream.labels" -}}
app.kubernetes.io/name: casestream
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The Secret mounted at /run/secrets/casestream. */}}
{{- define "casestream.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-secrets" .Release.Name) -}}
{{- end }}

{{/* Most replicas of a consuming service: one group member per partition at least
     (partitions / consumer concurrency), and the service's own cap when lower. */}}
{{- define "casestream.maxReplicas" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- $cap := div (int $root.Values.kafka.partitions) (int $root.Values.consumerConcurrency) -}}
{{- if lt (int $cap) 1 -}}{{- fail "kafka.partitions must be >= consumerConcurrency" -}}{{- end -}}
{{- $own := int (default $cap $svc.maxReplicas) -}}
{{- if gt $own (int $cap) -}}
{{- fail (printf "maxReplicas %d exceeds partitions/consumerConcurrency = %d: extra members would get no partition" $own (int $cap)) -}}
{{- end -}}
{{- $own -}}
{{- end }}

{{/* Environment shared by the services and the migration Job. */}}
{{- define "casestream.env" -}}
- name: CASESTREAM_ENV
  value: {{ .Values.environment | quote }}
- name: CASESTREAM_TRANSPORT_SECURITY
  value: {{ .Values.transportSecurity | quote }}
- name: CASESTREAM_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: CASESTREAM_AUTO_REGISTER_SCHEMAS
  value: "false"
- name: CASESTREAM_KAFKA_BOOTSTRAP
  value: {{ .Values.kafka.bootstrap | quote }}
{{- range $k, $v := .Values.kafka.properties }}
- name: {{ printf "CASESTREAM_KAFKA_PROP_%s" ($k | upper | replace "." "_") }}
  value: {{ $v | quote }}
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE
  value: /run/secrets/casestream/kafka-password
{{- end }}
- name: CASESTREAM_REGISTRY_URL
  value: {{ .Values.registry.url | quote }}
{{- range $k, $v := .Values.registry.properties }}
- name: {{ printf "CASESTREAM_REGISTRY_PROP_%s" ($k | upper | replace "." "_") }}
  value: {{ $v | quote }}
{{- end }}
{{- if .Values.registry.basicAuth }}
- name: CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO_FILE
  value: /run/secrets/casestream/registry-user-info
{{- end }}
- name: CASESTREAM_PG_URL
  value: {{ .Values.postgres.url | quote }}
- name: CASESTREAM_PG_PASSWORD_FILE
  value: /run/secrets/casestream/pg-password
- name: CASESTREAM_AUTH_JWT_ALGORITHM
  value: {{ .Values.auth.algorithm | quote }}
- name: CASESTREAM_AUTH_JWT_ISSUER
  value: {{ .Values.auth.issuer | quote }}
- name: CASESTREAM_AUTH_JWT_AUDIENCE
  value: {{ .Values.auth.audience | quote }}
{{- if .Values.auth.jwksUrl }}
- name: CASESTREAM_AUTH_JWKS_URL
  value: {{ .Values.auth.jwksUrl | quote }}
{{- else }}
- name: CASESTREAM_AUTH_JWT_KEY_FILE
  value: /run/secrets/casestream/jwt-key
{{- end }}
- name: CASESTREAM_CONSUMER_CONCURRENCY
  value: {{ .Values.consumerConcurrency | quote }}
{{- end }}
