from aws_lambda_powertools.event_handler.api_gateway import Router

router = Router()


@router.get("/a/<item>")
def one(item: str) -> dict:
    return {"module": "alpha", "id": item}
