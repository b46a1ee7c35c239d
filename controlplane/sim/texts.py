"""The simulator's input texts: support tickets, invoice scans and reply contexts in Chinese
and English, whose content matches the truth the generators answer with.

Pure: the same `random.Random` gives the same text. A text's length follows the result's
input tokens (CHARS_PER_TOKEN) up to MAX_CHARS, so payloads stay small. A long ticket is a
thread — history, order tables, signatures, disclaimers — with the sentence that decides
its label in the middle, as in the field. Every text carries a reference of letters only
(`reference`), which redaction keeps, so no two texts are the same.
"""

from __future__ import annotations

import functools
import random
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from itertools import chain
from typing import Any, TypeVar

T = TypeVar("T")
LANGUAGES = ("en", "zh")
# Roughly how many characters a token of each language covers.
CHARS_PER_TOKEN = {"en": 4.0, "zh": 1.5}
# The most characters generated for one text: about 10 KB of UTF-8 either way.
MAX_CHARS = {"en": 10_000, "zh": 3_300}
# Between the blocks of a text.
BREAK = "\n\n"


def target_chars(tokens: int, language: str) -> int:
    """How many characters a text of `tokens` input tokens gets (capped at MAX_CHARS)."""
    return min(round(tokens * CHARS_PER_TOKEN[language]), MAX_CHARS[language])


def reference(rng: random.Random) -> str:
    """A case reference of letters ("KXQT-RBMA"): one in 26^8, and no digit to redact."""
    n = _int(rng, 0, 26**8)
    letters = []
    for _ in range(8):
        n, k = divmod(n, 26)
        letters.append(string.ascii_uppercase[k])
    return f"{''.join(letters[:4])}-{''.join(letters[4:])}"


# `random.Random.choice` and `randrange` cost three times a `random()`: a long text draws
# hundreds of times.
def _pick(rng: random.Random, seq: Sequence[T]) -> T:
    return seq[int(rng.random() * len(seq))]


def _int(rng: random.Random, low: int, high: int) -> int:
    """An integer in [low, high)."""
    return low + int(rng.random() * (high - low))


# --- Values the templates are filled with ------------------------------------------------

ITEMS = {
    "en": ["rain jacket", "coffee grinder", "desk lamp", "pair of running shoes", "backpack"],
    "zh": ["羽绒服", "咖啡机", "台灯", "跑步鞋", "双肩包"],
}
COLORS = {"en": ["navy", "black", "olive", "grey"], "zh": ["藏青色", "黑色", "军绿色", "灰色"]}
CITIES = {"en": ["Lyon", "Leeds", "Porto", "Graz"], "zh": ["拉萨", "乌鲁木齐", "海口", "香港"]}
FEATURES = {
    "en": ["a 110 V socket", "the older charger", "a phone mount"],
    "zh": ["110伏电压", "旧款充电器", "手机支架"],
}
NAMES = {
    "en": ["Maria Keller", "Tom Brennan", "Aisha Rahman", "Lucas Moreau", "Emma Lindqvist"],
    "zh": ["王晓燕", "李明", "陈静", "张伟", "刘洋"],
}
SHOP = {"en": "Northwind Store", "zh": "北风优选"}


def _values(rng: random.Random, language: str) -> dict[str, Any]:
    return {
        "item": _pick(rng, ITEMS[language]),
        "color": _pick(rng, COLORS[language]),
        "city": _pick(rng, CITIES[language]),
        "feature": _pick(rng, FEATURES[language]),
        "name": _pick(rng, NAMES[language]),
        "shop": SHOP[language],
        "size": _pick(rng, ["S", "M", "L", "XL", "42", "44"]),
        "order": f"SO-{_int(rng, 10**6, 10**7)}",
        "amount": f"{_int(rng, 15, 400)}.{_int(rng, 0, 100):02d}",
        "month": _int(rng, 1, 12),
        "day": _int(rng, 1, 28),
        "hour": _int(rng, 8, 22),
        "minute": _int(rng, 0, 60),
        "tracking": f"{_pick(rng, ['JD', 'SF', 'YT'])}{_int(rng, 10**9, 10**10)}",
    }


# --- Support tickets ---------------------------------------------------------------------

# The sentences that decide a ticket's label: exactly one per ticket, none elsewhere.
DECIDING: dict[str, dict[str, tuple[str, ...]]] = {
    "refund": {
        "en": (
            "Please refund the {amount} I paid to my original payment method.",
            "I do not want the {item} any more, so I would like my money back.",
            "I have already sent the {item} back, so please process my refund as soon as possible.",
        ),
        "zh": (
            "麻烦帮我办理退款，把{amount}元退回原支付账户。",
            "这个{item}我不想要了，请直接给我退款。",
            "商品我已经寄回，请尽快把货款退给我。",
        ),
    },
    "exchange": {
        "en": (
            "Could you exchange it for a size {size}? I will send this one back.",
            "Please send me a replacement in {color} instead of this one.",
            "I would like to swap the {item} for the same model in size {size}.",
        ),
        "zh": (
            "能不能帮我换一件{size}码的？这件我会寄回。",
            "请给我换一个新的，颜色换成{color}。",
            "麻烦帮我换货，换成同款的{size}码。",
        ),
    },
    "complaint": {
        "en": (
            "Your courier left the parcel in the rain and ignored my calls, and I want to make a formal complaint.",
            "This is the third late delivery in a row and I am very disappointed with your service.",
            "Nobody has answered my emails for a week, which is simply unacceptable.",
        ),
        "zh": (
            "快递员态度非常差，包裹直接扔在门口，我要投诉。",
            "这已经是第三次延迟发货了，你们的服务让我很失望。",
            "客服电话一直打不通，对你们的服务非常不满意。",
        ),
    },
    "inquiry": {
        "en": (
            "Does the {item} work with {feature}?",
            "Could you tell me when the {item} will be back in stock?",
            "Do you deliver to {city}, and how much does shipping cost?",
        ),
        "zh": (
            "请问这款{item}支持{feature}吗？",
            "想问一下{item}什么时候会补货？",
            "请问你们可以寄到{city}吗？运费怎么算？",
        ),
    },
}

_HEADER = {
    "en": "Ticket {ref} · received by email\nSubject: Order {order}",
    "zh": "工单 {ref}｜邮件接入\n主题：订单 {order}",
}
_GREETING = {
    "en": ("Hello,", "Hi there,", "Dear customer service,", "Good morning,"),
    "zh": ("你好，", "客服你好，", "您好，", "在吗，"),
}
# Neutral sentences around the deciding one: what happened, no ask.
_CONTEXT = {
    "en": (
        "I ordered the {item} on {month}/{day} and it arrived yesterday.",
        "My order number is {order}.",
        "I have shopped with you for years and usually everything goes well.",
        "The parcel was handed to the front desk of my building.",
        "I opened the box this morning after work.",
        "I paid {amount} by card when I placed the order.",
    ),
    "zh": (
        "我在{month}月{day}日买了{item}，昨天刚到。",
        "我的订单号是 {order}。",
        "我在你们店买东西好几年了，一直都挺顺利的。",
        "包裹是放在小区门卫那里的。",
        "今天下班回来才拆开箱子。",
        "下单的时候我用银行卡付了{amount}元。",
    ),
}
_CLOSING = {
    "en": (
        "I have attached two photos of the box and the label.",
        "Thanks in advance for your help.",
        "I am at home most afternoons this week.",
    ),
    "zh": ("箱子和面单的照片我放在附件里了。", "先谢谢了。", "这周下午我基本都在家。"),
}
_SIGN_OFF = {"en": "Best regards,\n{name}", "zh": "{name}"}

# The thread around the latest message: earlier messages before it (oldest first), and
# after it what mail clients and the ticket system append: a signature, a disclaimer, the
# quoted thread, tracking. None of it asks anything.
_HISTORY = {
    "en": (
        "On {date} at {time}, {shop} Support wrote:\n> Thank you for contacting {shop}.\n> Your case reference is {ref}. We usually reply within one business day.\n> Please keep this reference in the subject line of any reply.",
        "On {date}, {shop} wrote:\n> Good news: order {order} has left our warehouse.\n> Carrier tracking number: {tracking}.\n> Deliveries usually take three to five business days.",
        "On {date}, {name} wrote:\n> I placed order {order} this afternoon and paid by card.\n> The confirmation email arrived a few minutes later.",
        "---------- Forwarded message ----------\nFrom: {shop} <orders@northwind.example>\nDate: {date}\nSubject: Your order {order} is confirmed\n> We have received your order and will let you know when it ships.\n> You can follow it any time in your account under Orders.",
        "On {date}, {shop} Support wrote:\n> We are sorry for the wait. Your message has been passed to our logistics team.\n> A colleague will write to you as soon as they have looked into it.",
        "On {date} at {time}, {name} wrote:\n> Just a note that I will be travelling until the end of next week.\n> My neighbour can take the parcel in if it comes while I am away.",
        "On {date}, {shop} Support wrote:\n> This is an automatic reminder that your case {ref} is still open.\n> Replying to this email adds your message to the case.",
    ),
    "zh": (
        "{date} {time} {shop}客服 写道：\n> 感谢您联系{shop}，您的工单号是 {ref}。\n> 我们通常在一个工作日内回复，请在回复时保留此工单号。",
        "{date} {shop} 写道：\n> 您的订单 {order} 已从仓库发出。\n> 快递单号：{tracking}，预计三到五个工作日送达。",
        "{date} {name} 写道：\n> 我今天下午下了订单 {order}，已经用银行卡付款了。\n> 几分钟后收到了确认邮件。",
        "---------- 转发的邮件 ----------\n发件人：{shop} <orders@northwind.example>\n日期：{date}\n主题：订单 {order} 已确认\n> 我们已收到您的订单，发货后会通知您。\n> 您可以随时在“我的订单”中查看物流。",
        "{date} {shop}客服 写道：\n> 很抱歉让您久等了，您的留言已转给物流部门。\n> 同事核实后会第一时间联系您。",
        "{date} {time} {name} 写道：\n> 我下周末之前都在出差。\n> 如果包裹到了，可以请邻居帮忙代收。",
        "{date} {shop}客服 写道：\n> 系统提醒：您的工单 {ref} 仍在处理中。\n> 直接回复本邮件即可补充信息。",
    ),
}
_APPENDED = {
    "en": (
        "--\n{name}\nProcurement, Harbourside Dental Clinic\n14 Quay Street, 2nd floor\nOffice hours Monday to Thursday",
        "Sent from my phone. Please excuse typos.",
        "CONFIDENTIALITY NOTICE: This email and any attachments are for the exclusive and confidential use of the intended recipient. If you are not the intended recipient, please do not read, distribute or take action in reliance upon this message. If you have received this in error, please notify us immediately by return email and promptly delete this message and its attachments from your computer system.",
        "Please consider the environment before printing this email.",
        "##- Please type your reply above this line -##\nYou are receiving this because you are subscribed to updates on ticket {ref}.",
    ),
    "zh": (
        "--\n{name}\n港湾口腔诊所 采购部\n码头路14号2楼\n办公时间：周一至周四",
        "发自我的手机",
        "保密声明：本邮件及其附件仅供指定收件人使用，可能包含保密信息。如果您不是指定收件人，请勿阅读、转发或使用本邮件内容，并请立即回复告知发件人后删除本邮件。",
        "##- 请在此行上方回复 -##\n您收到此邮件是因为您关注了工单 {ref}。",
    ),
}
_ORDER_TABLE_HEAD = {
    "en": "Order {order} ({date})\nItem                          Qty   Price",
    "zh": "订单 {order}（{date}）\n商品                数量   单价",
}
_TRACKING_HEAD = {"en": "Tracking {tracking}", "zh": "物流 {tracking}"}
_TRACKING_EVENTS = {
    "en": (
        "Parcel received at sorting centre",
        "In transit to the regional depot",
        "Arrived at the regional depot",
        "Out for delivery",
        "Delivery attempted, recipient not available",
        "Delivered to the building reception",
    ),
    "zh": (
        "快件已揽收",
        "运输中，发往转运中心",
        "到达转运中心",
        "派送中",
        "派送未成功，收件人不在",
        "已签收，门卫代收",
    ),
}
_DATE = {"en": "{d:%d %b %Y}", "zh": "{d.year}年{d.month}月{d.day}日"}
# Every date a text may name, written once (formatting dates is most of a text's cost).
_DAYS = [date(2025, 10, 1) + timedelta(days=n) for n in range(800)]
_DATES = {language: [form.format(d=d) for d in _DAYS] for language, form in _DATE.items()}
_ISO_DAYS = [d.isoformat() for d in _DAYS]
_TIMES = [f"{m // 60:02d}:{m % 60:02d}" for m in range(1440)]


class _Thread:
    """The blocks of one thread, dated forward from `start` (minutes since _DAYS[0]) as they
    are drawn; `values` fills the blocks (a field name in braces keeps the field)."""

    def __init__(
        self, rng: random.Random, language: str, values: Mapping[str, Any], start: int
    ) -> None:
        self.rng, self.language, self.values = rng, language, values
        self.minutes = start
        self.dates = _DATES[language]

    def _stamp(self) -> dict[str, str]:
        self.minutes += _int(self.rng, 20, 2000)
        day, minute = divmod(self.minutes, 1440)
        return {"date": self.dates[min(day, len(self.dates) - 1)], "time": _TIMES[minute]}

    def history(self) -> str:
        if self.rng.random() < 0.2:
            return self.order_table()
        template = _pick(self.rng, _HISTORY[self.language])
        return template.format(**self.values, **self._stamp())

    def order_table(self) -> str:
        rows = [_ORDER_TABLE_HEAD[self.language].format(**self.values, **self._stamp())]
        for _ in range(_int(self.rng, 2, 7)):
            item = _pick(self.rng, ITEMS[self.language])
            price = f"{_int(self.rng, 5, 300)}.{_int(self.rng, 0, 100):02d}"
            rows.append(f"{item:<28}  {_int(self.rng, 1, 4):>3}   {price:>7}")
        return "\n".join(rows)

    def tracking(self) -> str:
        rows = [_TRACKING_HEAD[self.language].format(**self.values)]
        for event in _TRACKING_EVENTS[self.language][: _int(self.rng, 3, 7)]:
            stamp = self._stamp()
            rows.append(f"{stamp['date']} {stamp['time']}  {event}")
        return "\n".join(rows)


# Threads are drawn once per language and process, with the ticket's own values left as
# fields: a long ticket then costs a few draws and one `format`, not hundreds of draws.
THREADS = 48
THREAD_BLOCKS = 80
_OWN = {k: "{" + k + "}" for k in ("order", "name", "shop", "tracking", "ref")}


@dataclass(frozen=True, slots=True)
class _Threads:
    recent: list[list[str]]  # threads of the months before the latest message
    quoted: list[list[str]]  # older threads, quoted (">") as mail clients append them
    tracking: list[str]


@functools.cache
def _threads(language: str) -> _Threads:
    rng = random.Random(f"threads:{language}")

    def thread(first_day: int) -> list[str]:
        history = _Thread(rng, language, _OWN, 1440 * first_day)
        return [history.history() for _ in range(THREAD_BLOCKS)]

    recent = [thread(_int(rng, 250, 450)) for _ in range(THREADS)]
    older = [thread(_int(rng, 0, 150)) for _ in range(THREADS)]
    quoted = [["\n".join(f">{line}" for line in b.splitlines()) for b in t] for t in older]
    tracking = [_Thread(rng, language, _OWN, 1440 * 700).tracking() for _ in range(THREADS)]
    return _Threads(recent, quoted, tracking)


def _fill(blocks: Iterable[str], budget: int) -> list[str]:
    """The first `blocks` up to about `budget` characters (a block goes in when at least
    half of it fits)."""
    kept: list[str] = []
    used = 0
    for block in blocks:
        if used + len(block) / 2 > budget:
            break
        kept.append(block)
        used += len(block) + len(BREAK)
    return kept


def _length(blocks: list[str]) -> int:
    return sum(len(b) + len(BREAK) for b in blocks)


@dataclass(frozen=True, slots=True)
class Ticket:
    text: str
    language: str
    # The sentence that decides the label, as it stands in the text.
    deciding: str


def ticket(rng: random.Random, label: str, tokens: int) -> Ticket:
    """A support ticket whose one deciding sentence asks what `label` names, about
    `tokens` long: a header and the latest message, with the thread's history before it
    and what mail and ticket systems append after it, so that the deciding sentence sits in
    the middle of a long ticket."""
    language = _pick(rng, LANGUAGES)
    values = {**_values(rng, language), "ref": reference(rng)}
    deciding = _pick(rng, DECIDING[label][language]).format(**values)
    context = rng.sample(_CONTEXT[language], 2)
    sentences = [context[0].format(**values), deciding, context[1].format(**values)]
    sentences.append(_pick(rng, _CLOSING[language]).format(**values))
    joiner = " " if language == "en" else ""
    message = "\n".join(
        [
            _pick(rng, _GREETING[language]),
            joiner.join(sentences),
            _SIGN_OFF[language].format(**values),
        ]
    )
    header = _HEADER[language].format(**values)
    threads = _threads(language)
    # As many characters before the deciding sentence as after it: the history takes what
    # the header and the message's start leave of the first half, the appended the rest.
    rest = target_chars(tokens, language) - len(header) - len(message)
    before = message.index(deciding)
    after = len(message) - before - len(deciding)
    recent = _pick(rng, threads.recent)
    pre = _fill(recent[_int(rng, 0, 20) :], (rest + after - before - len(header)) // 2)
    # The mail client's tail and the tracking once, then an older thread quoted.
    tail = [*_APPENDED[language], _pick(rng, threads.tracking)]
    quoted = _pick(rng, threads.quoted)[_int(rng, 0, 20) :]
    post = _fill(chain(tail, quoted), rest - _length(pre))
    text = BREAK.join(["{header}", *pre, "{message}", *post])
    return Ticket(text.format(**values, header=header, message=message), language, deciding)


# --- Invoice scans -----------------------------------------------------------------------

VENDORS = {
    "en": ["Brightline Office Supply Ltd", "Kestrel Logistics GmbH", "Harbour Print & Copy"],
    "zh": ["上海启明办公用品有限公司", "深圳鹏程物流有限公司", "杭州西湖印务有限公司"],
}
SERVICES = {
    "en": [
        "A4 copy paper, 5 reams",
        "Toner cartridge",
        "Courier service",
        "Desk chair",
        "Monthly data backup",
        "Printing, flyers A5",
        "Cable set",
        "On-site support, hours",
    ],
    "zh": [
        "A4复印纸（5包）",
        "硒鼓",
        "快递服务费",
        "办公椅",
        "云备份月费",
        "A5宣传单印刷",
        "线缆套装",
        "上门技术支持（小时）",
    ],
}
# Sales tax rates by language: (label, rate).
TAXES = {
    "en": [("VAT 20%", 0.2), ("VAT 7%", 0.07), ("VAT 0%", 0.0)],
    "zh": [("税额（13%）", 0.13), ("税额（6%）", 0.06)],
}
_INVOICE_HEAD = {
    "en": "{vendor}\n{street} · VAT No. GB{vat}\n\nINVOICE\nInvoice No.: {invoice_id}\nInvoice date: {date}\nScan reference: {ref}\nBill to: {customer}\n\nDescription                       Qty   Unit price      Amount",
    "zh": "{vendor}\n地址：{street}  纳税人识别号：91{vat}\n\n发  票\n发票号码：{invoice_id}\n开票日期：{date}\n扫描编号：{ref}\n购买方：{customer}\n\n项目名称                数量      单价        金额",
}
_TOTALS = {
    "en": "Subtotal {currency} {subtotal}\n{tax} {currency} {tax_amount}\nTotal due {currency} {total}",
    "zh": "小计：{currency} {subtotal}\n{tax}：{currency} {tax_amount}\n价税合计：{currency} {total}",
}
_REMARK = {"en": "Remarks: {remark}", "zh": "备注：{remark}"}
_PAYMENT = {
    "en": "Please pay by bank transfer to IBAN GB{iban}, quoting {invoice_id}.",
    "zh": "开户行：招商银行  账号：6214{iban}  付款时请注明发票号码 {invoice_id}。",
}
_TERMS = {
    "en": (
        "Terms and conditions. Goods remain our property until paid in full. Claims for damaged or missing goods must be made in writing within seven days of delivery.",
        "Late payment. We reserve the right to charge interest on overdue amounts at the statutory rate, together with reasonable recovery costs.",
        "Returns are accepted only in the original packaging and with a copy of this invoice. Special orders cannot be returned.",
        "This document was generated electronically and is valid without a signature.",
    ),
    "zh": (
        "条款：货款付清前货物所有权归销售方所有。货物损坏或短缺请于收货后七日内书面提出。",
        "逾期付款：销售方有权按法定利率对逾期款项计收利息及合理的追偿费用。",
        "退货须保留原包装并附本发票复印件，定制商品不予退货。",
        "本发票为电子开具，无需签字盖章即有效。",
    ),
}
# Long scans go on with an appendix: pages of a delivery log (no money in it).
PAGE_ROWS = 6
_APPENDIX_PAGE = {
    "en": "Page {page} · Appendix: delivery log for {invoice_id}\nDate         Consignment    Destination   Weight",
    "zh": "第{page}页 · 附件：{invoice_id} 配送明细\n日期            运单号          目的地      重量",
}


def money(cents: int) -> str:
    """An amount as invoices print it: 1,234.56."""
    return f"{cents / 100:,.2f}"


def _lines(rng: random.Random, cents: int, count: int) -> list[tuple[int, int, int]]:
    """`count` lines (quantity, unit price, amount, in cents) whose amounts sum to `cents`:
    the last line takes what the others leave."""
    count = max(1, min(count, cents // 500))
    lines = []
    left = cents
    for _ in range(count - 1):
        quantity = _int(rng, 1, 5)
        unit = max(1, int(cents * 0.8 / count * rng.uniform(0.5, 1.5) / quantity))
        if quantity * unit >= left:
            break
        lines.append((quantity, unit, quantity * unit))
        left -= quantity * unit
    lines.append((1, left, left))
    return lines


def invoice(
    rng: random.Random, fields: Mapping[str, Any], remark: Mapping[str, str], tokens: int
) -> str:
    """An invoice's scanned text: its number `fields["invoice_id"]`, and line items, tax
    and a total due of `fields["amount"]` in `fields["currency"]`; the remark in its
    language from `remark` ({"en": …, "zh": …}); terms and page notes up to about `tokens`."""
    language = _pick(rng, LANGUAGES)
    budget = target_chars(tokens, language)
    total = round(fields["amount"] * 100)
    tax, rate = _pick(rng, TAXES[language])
    tax_cents = round(total * rate / (1 + rate))
    values = {
        "vendor": _pick(rng, VENDORS[language]),
        "street": _pick(
            rng, ["12 Mill Lane, Bristol", "Hafenstraße 8, Hamburg", "88 Wharf Road, Leeds"]
        )
        if language == "en"
        else _pick(rng, ["浦东新区张江路88号", "南山区科技园南路12号", "西湖区文三路66号"]),
        "vat": _int(rng, 10**8, 10**9),
        "iban": _int(rng, 10**11, 10**12),
        "customer": _pick(rng, NAMES[language]),
        "date": _pick(rng, _DATES[language][:420]),
        "ref": reference(rng),
        "invoice_id": fields["invoice_id"],
        "currency": fields["currency"],
        "tax": tax,
        "subtotal": money(total - tax_cents),
        "tax_amount": money(tax_cents),
        "total": money(total),
        "remark": remark[language],
    }
    blocks = [_INVOICE_HEAD[language].format(**values)]
    rows = []
    for quantity, unit, amount in _lines(rng, total - tax_cents, min(12, max(1, budget // 300))):
        service = _pick(rng, SERVICES[language])
        rows.append(f"{service:<32}  {quantity:>3}  {money(unit):>11}  {money(amount):>10}")
    blocks += ["\n".join(rows), _TOTALS[language].format(**values)]
    blocks += [_REMARK[language].format(**values), _PAYMENT[language].format(**values)]
    rows = _appendix(language)
    start = _int(rng, 0, len(rows) // 2)
    pages = (
        "\n".join(
            [_APPENDIX_PAGE[language].format(**values, page=page + 2), *rows[k : k + PAGE_ROWS]]
        )
        for page, k in enumerate(range(start, len(rows) - PAGE_ROWS, PAGE_ROWS))
    )
    blocks += _fill(chain(_TERMS[language], pages), budget - _length(blocks))
    return BREAK.join(blocks)


@functools.cache
def _appendix(language: str) -> list[str]:
    """The rows of a long delivery log, drawn once per language and process (an appendix is
    a run of them)."""
    rng = random.Random(f"appendix:{language}")
    rows = []
    day = 0
    for _ in range(600):
        day += _int(rng, 0, 2)
        consignment = f"{_pick(rng, ['JD', 'SF', 'YT'])}{_int(rng, 10**9, 10**10)}"
        city = _pick(rng, CITIES[language])
        weight = _int(rng, 1, 300) / 10
        rows.append(f"{_ISO_DAYS[day]}   {consignment}   {city:<12}  {weight} kg")
    return rows


# --- Reply contexts ----------------------------------------------------------------------

# Per simulated reply (profiles.REWRITES, in its order): its language, the customer's
# message it answers and the agent's draft the rewrite starts from, with the same facts.
REPLY_CONTEXTS = (
    (
        "zh",
        "我上周把东西寄回去了，退款{amount}元什么时候能到账？",
        "退款{amount}元 今天已退原账户 有问题打{phone}",
    ),
    (
        "zh",
        "这件商品我拆封试穿过了，还能七天无理由退货吗？说明发我邮箱 {email} 吧。",
        "该商品不支持七天无理由退货 说明已发{email}",
    ),
    (
        "en",
        "Hi, I returned the jacket last week. When will I get my ${amount} back? My email is {email}.",
        "refund ${amount} sent today, will email {email} when it lands",
    ),
    (
        "en",
        "I just noticed the delivery address on my order is wrong. Can you change it to my new flat?",
        "cant change address after shipping, customer should call {phone}",
    ),
    (
        "zh",
        "我的订单 {order} 什么时候能到？我电话是 {phone}。",
        "订单{order} 3天内到 让客户保持电话{phone}畅通",
    ),
)
_CHAT_HEAD = {
    "en": "Conversation {ref} · web chat · rewrite the agent's draft as a polite reply",
    "zh": "会话 {ref}｜网页客服｜请把客服草稿改写成正式回复",
}
# The current chat up to the customer's message, in order.
_CHAT_OPENING = {
    "en": (
        "[Bot] Hi! I'm the Northwind assistant. What can I help you with today?",
        "[Customer] I have a question about an order.",
        "[Bot] Sure. Please give me a moment while I connect you to a colleague.",
        "[System] The conversation was transferred to an agent.",
        "[Agent] Hello, thank you for waiting. How can I help?",
    ),
    "zh": (
        "[机器人] 您好，我是北风优选智能助手，请问有什么可以帮您？",
        "[客户] 我想咨询一下订单的问题。",
        "[机器人] 好的，正在为您转接人工客服，请稍候。",
        "[系统] 会话已转接至人工客服。",
        "[客服] 您好，感谢您的耐心等待，请问有什么可以帮您？",
    ),
}
# Earlier chats of the same customer, shown above the current one (other matters, closed).
_EARLIER = {
    "en": (
        "[Customer] Can I still add a second lamp to yesterday's order?\n[Agent] I'm afraid the order has already been packed, but you can place a new one and we will ship them together if possible.\n[Customer] OK, I'll do that.\n[System] The conversation was closed.",
        "[Customer] My discount code from the newsletter is not accepted.\n[Agent] I have checked it: the code expired last Sunday. I have added a new one to your account.\n[Customer] Great, it works now. Thanks!\n[System] The conversation was closed.",
        "[Customer] Please update my phone number on my account.\n[Agent] Done, the new number is saved. Is there anything else?\n[Customer] No, that's all.\n[System] The conversation was closed.",
        "[Customer] Is the black backpack waterproof?\n[Agent] It is water-resistant: fine in light rain, but not for heavy storms.\n[Customer] Good to know, thank you.\n[System] The conversation was closed.",
    ),
    "zh": (
        "[客户] 昨天的订单还能再加一盏台灯吗？\n[客服] 抱歉，订单已经打包了，您可以再下一单，我们尽量一起发出。\n[客户] 好的，我再下一单。\n[系统] 会话已结束。",
        "[客户] 公众号发的优惠码用不了。\n[客服] 我查了一下，这个优惠码上周日已过期，已经给您账户补发了一张新的。\n[客户] 好了，能用了，谢谢！\n[系统] 会话已结束。",
        "[客户] 帮我改一下账户里的手机号。\n[客服] 已经改好了，新号码已保存。还有其他问题吗？\n[客户] 没有了。\n[系统] 会话已结束。",
        "[客户] 黑色双肩包防水吗？\n[客服] 是防泼水的，小雨没问题，大暴雨不建议。\n[客户] 明白了，谢谢。\n[系统] 会话已结束。",
    ),
}
_EARLIER_HEAD = {"en": "--- Earlier chat, {date} ---", "zh": "--- 历史会话 {date} ---"}
_LATEST = {"en": "[Customer] {message}", "zh": "[客户] {message}"}
_DRAFT = {"en": "Agent's draft:\n{draft}", "zh": "客服草稿：\n{draft}"}


def reply_context(rng: random.Random, reply: int, fill: Mapping[str, Any], tokens: int) -> str:
    """The conversation a reply rewrite is asked in: earlier turns up to about `tokens`, then
    the customer's message and the agent's draft of REPLY_CONTEXTS[reply], filled with the
    reply's own facts (`fill`: amount, phone, email, order)."""
    language, message, draft = REPLY_CONTEXTS[reply]
    head = _CHAT_HEAD[language].format(ref=reference(rng))
    latest = _LATEST[language].format(message=message.format(**fill))
    end = [latest, _DRAFT[language].format(draft=draft.format(**fill))]
    opening = list(_CHAT_OPENING[language])
    budget = target_chars(tokens, language) - len(head) - _length(opening) - _length(end)
    dates = _DATES[language]
    day = _int(rng, 0, 200)
    earlier = []
    for session in _fill(iter(lambda: _pick(rng, _EARLIER[language]), None), budget):
        day = min(day + _int(rng, 2, 15), len(dates) - 1)
        earlier += [_EARLIER_HEAD[language].format(date=dates[day]), session]
    return "\n".join([head, *earlier, *opening, *end])
