"""The world's rules and who may change them: the manifest, its patches and the policy."""
