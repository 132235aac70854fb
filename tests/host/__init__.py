"""The host floor (highlander/_host) on real files, descriptors and uids, no succession."""
