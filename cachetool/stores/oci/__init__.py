"""``oci://host[:port]/repo``: bundles as OCI artifacts in a registry (see :mod:`.store` and docs/stores.md).

One concept per module: :mod:`.media` (the documents and how they are recognised), :mod:`.packs` (small blobs
grouped into layers), :mod:`.auth` (credential files), :mod:`.tls` (CA per registry), :mod:`.client` (the HTTP
API: scheme, auth, retries), :mod:`.repository` (the requests to one repository), :mod:`.manifests` (what is known
of each bundle manifest), :mod:`.uploads` (blob transfers), :mod:`.push` (a push session), :mod:`.refs` (tags),
:mod:`.signatures` (referrers), :mod:`.gc`, and :mod:`.store` (the :class:`cachetool.stores.base.Store` that holds
them).
"""

from cachetool.stores.oci.auth import docker_config_path, registry_credentials
from cachetool.stores.oci.media import ARTIFACT_TYPE, CONFIG_MEDIA_TYPE, SIGNATURE_ARTIFACT_TYPE
from cachetool.stores.oci.store import OCIStore

__all__ = [
    "OCIStore",
    "registry_credentials",
    "docker_config_path",
    "ARTIFACT_TYPE",
    "CONFIG_MEDIA_TYPE",
    "SIGNATURE_ARTIFACT_TYPE",
]
