package kubeapi

import (
	"slices"
	"time"
)

// The core/v1 objects, with only the fields the arrival prober writes or reads; the API
// server ignores none of what is sent and the decoder ignores the rest of what comes back.

// TypeMeta is an object's apiVersion and kind.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// ObjectMeta is the part of an object's metadata used here.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
}

// OwnerReference makes an object go when its owner goes (the garbage collector).
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

// OwnedBy reports whether m has an owner reference to uid.
func (m ObjectMeta) OwnedBy(uid string) bool {
	return slices.ContainsFunc(m.OwnerReferences, func(r OwnerReference) bool { return r.UID == uid })
}

// PersistentVolumeClaim is a core/v1 PersistentVolumeClaim.
type PersistentVolumeClaim struct {
	TypeMeta
	Metadata ObjectMeta `json:"metadata"`
	Spec     PVCSpec    `json:"spec"`
	Status   PVCStatus  `json:"status,omitzero"`
}

// PVCSpec is what a claim asks for.
type PVCSpec struct {
	StorageClassName *string              `json:"storageClassName,omitempty"`
	AccessModes      []string             `json:"accessModes,omitempty"`
	VolumeMode       string               `json:"volumeMode,omitempty"`
	Resources        ResourceRequirements `json:"resources,omitzero"`
	VolumeName       string               `json:"volumeName,omitempty"`
}

// PVCStatus is a claim's phase: Pending, Bound or Lost.
type PVCStatus struct {
	Phase string `json:"phase,omitempty"`
}

// ResourceRequirements are quantities as the API writes them ("1Gi", "10m").
type ResourceRequirements struct {
	Requests map[string]string `json:"requests,omitempty"`
	Limits   map[string]string `json:"limits,omitempty"`
}

// Pod is a core/v1 Pod.
type Pod struct {
	TypeMeta
	Metadata ObjectMeta `json:"metadata"`
	Spec     PodSpec    `json:"spec"`
	Status   PodStatus  `json:"status,omitzero"`
}

// PodSpec is the part of a pod's spec used here.
type PodSpec struct {
	RestartPolicy                 string      `json:"restartPolicy,omitempty"`
	AutomountServiceAccountToken  *bool       `json:"automountServiceAccountToken,omitempty"`
	TerminationGracePeriodSeconds *int64      `json:"terminationGracePeriodSeconds,omitempty"`
	Containers                    []Container `json:"containers"`
	Volumes                       []Volume    `json:"volumes,omitempty"`
	NodeName                      string      `json:"nodeName,omitempty"`
}

// Container is one container of a pod.
type Container struct {
	Name            string               `json:"name"`
	Image           string               `json:"image"`
	Command         []string             `json:"command,omitempty"`
	Args            []string             `json:"args,omitempty"`
	VolumeMounts    []VolumeMount        `json:"volumeMounts,omitempty"`
	Resources       ResourceRequirements `json:"resources,omitzero"`
	SecurityContext *SecurityContext     `json:"securityContext,omitempty"`
	// Falling back to the logs on error: a container that fails without a termination message has
	// its log's tail as one, so that the pod's status says why.
	TerminationMessagePolicy string `json:"terminationMessagePolicy,omitempty"`
}

// VolumeMount mounts a pod's volume in a container.
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
}

// Volume is a pod's volume; only claims are used here.
type Volume struct {
	Name                  string           `json:"name"`
	PersistentVolumeClaim *PVCVolumeSource `json:"persistentVolumeClaim,omitempty"`
}

// PVCVolumeSource names the claim a volume is.
type PVCVolumeSource struct {
	ClaimName string `json:"claimName"`
}

// SecurityContext is a container's security context.
type SecurityContext struct {
	RunAsUser                *int64          `json:"runAsUser,omitempty"`
	RunAsGroup               *int64          `json:"runAsGroup,omitempty"`
	ReadOnlyRootFilesystem   *bool           `json:"readOnlyRootFilesystem,omitempty"`
	AllowPrivilegeEscalation *bool           `json:"allowPrivilegeEscalation,omitempty"`
	Capabilities             *Capabilities   `json:"capabilities,omitempty"`
	SeccompProfile           *SeccompProfile `json:"seccompProfile,omitempty"`
}

// Capabilities are added to or dropped from a container's.
type Capabilities struct {
	Drop []string `json:"drop,omitempty"`
}

// SeccompProfile is a container's seccomp profile (the runtime's default).
type SeccompProfile struct {
	Type string `json:"type"`
}

// PodStatus is a pod's phase (Pending, Running, Succeeded, Failed, Unknown) and its
// containers' states.
type PodStatus struct {
	Phase             string            `json:"phase,omitempty"`
	Reason            string            `json:"reason,omitempty"`
	Message           string            `json:"message,omitempty"`
	ContainerStatuses []ContainerStatus `json:"containerStatuses,omitempty"`
}

// ContainerStatus is one container's state.
type ContainerStatus struct {
	Name  string         `json:"name"`
	State ContainerState `json:"state"`
}

// ContainerState is one of waiting, running and terminated.
type ContainerState struct {
	Waiting    *ContainerStateWaiting    `json:"waiting,omitempty"`
	Running    *ContainerStateRunning    `json:"running,omitempty"`
	Terminated *ContainerStateTerminated `json:"terminated,omitempty"`
}

// ContainerStateWaiting says why a container has not started (its volume not mounted
// yet, its image not pulled, its configuration refused…).
type ContainerStateWaiting struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ContainerStateRunning is a running container.
type ContainerStateRunning struct {
	StartedAt *time.Time `json:"startedAt,omitempty"`
}

// ContainerStateTerminated is a container that ran and exited.
type ContainerStateTerminated struct {
	ExitCode  int32      `json:"exitCode"`
	Reason    string     `json:"reason,omitempty"`
	Message   string     `json:"message,omitempty"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
}

// Event is a core/v1 Event about an object.
type Event struct {
	Type          string     `json:"type,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	Message       string     `json:"message,omitempty"`
	Count         int32      `json:"count,omitempty"`
	LastTimestamp *time.Time `json:"lastTimestamp,omitempty"`
	EventTime     *time.Time `json:"eventTime,omitempty"`
}

// When is the last time the event happened: lastTimestamp, or eventTime for the events
// of the events.k8s.io API, which leave lastTimestamp empty.
func (e Event) When() time.Time {
	switch {
	case e.LastTimestamp != nil:
		return *e.LastTimestamp
	case e.EventTime != nil:
		return *e.EventTime
	}
	return time.Time{}
}
