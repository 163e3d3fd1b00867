from tests.signing_keys import keys  # noqa: F401 - fixtures of this folder
from tests.store_kinds import (  # noqa: F401
    any_store,
    bundle,
    cuda_bundle,
    isolated,
    local_platform,
    shared_bucket,
    stoppable_store,
    tree,
)
