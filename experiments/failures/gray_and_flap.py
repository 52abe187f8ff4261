# A gray link (2 % random loss) on one spine uplink, then a flapping uplink elsewhere,
# then plane 1 degraded to a quarter of its rate.
gray = gray_link("p0l1-p0s2", loss=0.02)
flap = flap_link("p1l2-p1s3", period_s=0.5, duty=0.2)
slow = degrade_link("p1l0-p1s0", rate_mbit=25)
timeline = [
    at(1.0, gray),
    at(2.0, flap),
    at(3.0, slow),
    at(5.0, restore(flap)),
    at(6.0, restore(gray)),
    at(6.0, restore(slow)),
]
