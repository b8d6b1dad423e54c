//! The user-coupons table's change stream, as Lambda delivers it: each
//! record's images (DynamoDB JSON, `{"S": "..."}`) read back into the
//! domain's [`CouponChange`] with the same parsing the wallet uses, so the
//! notifier and the wallet can never read one item two ways.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use coupon_domain::ids::UserId;
use coupon_domain::notify::{CouponChange, Record};
use serde_json::Value;

use super::items::{get_s, Item};
use super::wallet::parse_user_coupon;

/// One record of a DynamoDB stream event (`Records[i]`): its sequence
/// number (the id a partial batch response names; empty if it has none,
/// which the caller must treat as the whole batch failing) and its change.
pub fn stream_record(record: &Value) -> Record {
    let id = record
        .pointer("/dynamodb/SequenceNumber")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Record {
        id,
        change: coupon_change(record),
    }
}

fn coupon_change(record: &Value) -> Result<CouponChange, String> {
    let image = |name: &str| -> Result<Option<Item>, String> {
        match record.pointer(&format!("/dynamodb/{name}")) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => item(v).map(Some).map_err(|e| format!("{name}: {e}")),
        }
    };
    let (before, after) = (image("OldImage")?, image("NewImage")?);
    let event = record.get("eventName").and_then(Value::as_str).unwrap_or_default();
    match event {
        "INSERT" | "MODIFY" if after.is_none() => {
            return Err(format!(
                "{event} without a new image (the stream must be NEW_AND_OLD_IMAGES)"
            ))
        }
        "MODIFY" | "REMOVE" if before.is_none() => {
            return Err(format!(
                "{event} without an old image (the stream must be NEW_AND_OLD_IMAGES)"
            ))
        }
        "INSERT" | "MODIFY" | "REMOVE" => {}
        other => return Err(format!("unknown eventName {other:?}")),
    }
    let any = after.as_ref().or(before.as_ref()).ok_or("a record with no image")?;
    let user = get_s(any, "user_id")
        .and_then(|u| UserId::parse(u).ok())
        .ok_or("no readable user_id")?;
    let coupon = |i: Option<Item>| -> Result<_, String> {
        i.map(|i| parse_user_coupon(&i).ok_or("an image the wallet cannot read".to_owned()))
            .transpose()
    };
    Ok(CouponChange {
        user,
        before: coupon(before)?,
        after: coupon(after)?,
    })
}

/// A DynamoDB-JSON item (`{"name": {"S": "..."}, ...}`).
fn item(v: &Value) -> Result<Item, String> {
    v.as_object()
        .ok_or("an image that is not an object")?
        .iter()
        .map(|(k, v)| attribute(v).map(|a| (k.clone(), a)))
        .collect()
}

fn attribute(v: &Value) -> Result<AttributeValue, String> {
    let (kind, inner) = v
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
        .ok_or("an attribute that is not {TYPE: value}")?;
    let strings = |inner: &Value| -> Result<Vec<String>, String> {
        inner
            .as_array()
            .ok_or("a set that is not an array")?
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| "a set member that is not a string".to_owned())
            })
            .collect()
    };
    let text = |inner: &Value| {
        inner
            .as_str()
            .map(str::to_owned)
            .ok_or(format!("{kind} that is not a string"))
    };
    Ok(match kind.as_str() {
        "S" => AttributeValue::S(text(inner)?),
        "N" => AttributeValue::N(text(inner)?),
        // Kept as the base64 text: no coupon attribute is binary.
        "B" => AttributeValue::B(Blob::new(text(inner)?)),
        "BOOL" => AttributeValue::Bool(inner.as_bool().ok_or("BOOL that is not a boolean")?),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(strings(inner)?),
        "NS" => AttributeValue::Ns(strings(inner)?),
        "L" => AttributeValue::L(
            inner
                .as_array()
                .ok_or("L that is not an array")?
                .iter()
                .map(attribute)
                .collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(item(inner)?.into_iter().collect::<HashMap<_, _>>()),
        other => return Err(format!("unknown attribute type {other}")),
    })
}

#[cfg(test)]
mod tests {
    use coupon_domain::user_coupon::CouponState;
    use serde_json::json;

    use super::*;

    fn image(status: &str, extra: Value) -> Value {
        let mut v = json!({
            "pk": {"S": "USER#u-1"}, "sk": {"S": "COUPON#spring-20#001"},
            "coupon_id": {"S": "spring-20"}, "user_id": {"S": "u-1"}, "ordinal": {"N": "1"},
            "grant_id": {"S": "spring-20-0-1-7"}, "status": {"S": status}, "name": {"S": "10 off"},
            "amount": {"N": "1000"}, "received_at_ms": {"N": "5"}, "valid_from_ms": {"N": "0"},
            "valid_until_ms": {"N": "100"}, "expires_at": {"N": "9"},
        });
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    }

    #[test]
    fn a_modify_record_reads_as_the_coupon_before_and_after() {
        let record = json!({
            "eventName": "MODIFY",
            "dynamodb": {
                "SequenceNumber": "42",
                "OldImage": image("USED", json!({"order_id": {"S": "o-1"}, "used_at_ms": {"N": "7"}})),
                "NewImage": image("UNUSED", json!({"returned_by": {"SS": ["o-1"]}, "returned_at_ms": {"N": "8"}})),
            }
        });
        let r = stream_record(&record);
        assert_eq!(r.id, "42");
        let change = r.change.unwrap();
        assert_eq!(change.user.as_str(), "u-1");
        let (before, after) = (change.before.unwrap(), change.after.unwrap());
        assert_eq!(before.status, CouponState::Used);
        assert_eq!(before.order_id.unwrap().as_str(), "o-1");
        assert_eq!(after.returned_at_ms, Some(8));
        assert_eq!(after.returned_by.len(), 1);
    }

    #[test]
    fn records_the_notifier_cannot_read_say_why() {
        let keys_only = json!({"eventName": "MODIFY", "dynamodb": {"SequenceNumber": "1", "Keys": {}}});
        assert!(stream_record(&keys_only)
            .change
            .unwrap_err()
            .contains("NEW_AND_OLD_IMAGES"));
        let bad_type = json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"status": {"X": "1"}}}});
        assert!(stream_record(&bad_type)
            .change
            .unwrap_err()
            .contains("unknown attribute type"));
        let no_status = json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"user_id": {"S": "u"}}}});
        assert!(stream_record(&no_status).change.unwrap_err().contains("cannot read"));
    }
}
