from tests.signing_keys import keys  # noqa: F401 - fixtures of this folder
from tests.store_kinds import (any_store, bundle, cuda_bundle, isolated, local_platform, shared_bucket,  # noqa: F401
                               stoppable_store, tree)
