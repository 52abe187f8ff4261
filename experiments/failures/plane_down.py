# A whole plane fails for 3 seconds.
plane = fail_plane(1)
timeline = [at(2.0, plane), at(5.0, restore(plane))]
