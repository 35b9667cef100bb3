from app import describe, total_value

ITEMS = [{"price": 2.5, "quantity": 4}, {"price": 10.0, "quantity": 1}]


def test_total_value():
    assert total_value(ITEMS) == 20.0


def test_describe():
    assert describe(ITEMS) == "2 items worth 20.00"
