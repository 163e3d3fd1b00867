from tests.signing_keys import keys  # noqa: F401 - fixtures of this folder
from tests.store_kinds import bundle, cuda_bundle, isolated, local_platform, tree  # noqa: F401
