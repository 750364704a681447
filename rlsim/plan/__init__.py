"""What `rlsim plan` reads: a framework's launch config turned into the Ray placement groups it
will create, placed on a cluster as Ray would place them, with what will not fit said."""
